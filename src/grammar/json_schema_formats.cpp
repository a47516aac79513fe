#include "grammar/json_schema_formats.h"

#include <initializer_list>
#include <string_view>

namespace deepinfer::grammar {

namespace {

// Days per month, with 29 February only in leap years (Gregorian: divisible by 4, centuries by
// 400).
const char* kDate =
    "(\\d{4}-(0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])"
    "|\\d{4}-(0[469]|11)-(0[1-9]|[12]\\d|30)"
    "|\\d{4}-02-(0[1-9]|1\\d|2[0-8])"
    "|(\\d\\d(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29)";
const char* kTime = "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d+)?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
// Pieces appended one by one: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string.
std::string cat(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) out += p;
  return out;
}

std::string ipv6() {
  const std::string_view h = "[0-9a-fA-F]{1,4}";
  return cat({"((", h, ":){7}", h, "|(", h, ":){1,7}:|(", h, ":){1,6}:", h, "|(", h, ":){1,5}(:", h, "){1,2}|(", h,
              ":){1,4}(:", h, "){1,3}|(", h, ":){1,3}(:", h, "){1,4}|(", h, ":){1,2}(:", h, "){1,5}|", h, ":(:", h,
              "){1,6}|:((:", h, "){1,7}|:))"});
}

}  // namespace

std::optional<std::string> format_regex(const std::string& format) {
  if (format == "date") return std::string(kDate);
  if (format == "time") return std::string(kTime);
  if (format == "date-time") return cat({kDate, "T", kTime});
  if (format == "uuid") return std::string("[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}");
  if (format == "ipv4") {
    const std::string_view octet = "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
    return cat({octet, "(\\.", octet, "){3}"});
  }
  if (format == "ipv6") return ipv6();
  if (format == "email") {
    const std::string_view atom = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
    const std::string_view label = "[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?";
    return cat({atom, "(\\.", atom, ")*@", label, "(\\.", label, ")+"});
  }
  if (format == "hostname") {
    // RFC 1123 labels; the 253-character total and the ban on "--" (a stricter stand-in for
    // IDNA's rules on A-labels) are added by the JSON Schema compiler (format_needs_dfa).
    const std::string_view label = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
    return cat({label, "(\\.", label, ")*"});
  }
  if (format == "uri") {
    const std::string_view pchar = "([A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})";
    return cat({"[A-Za-z][A-Za-z0-9+.-]*:(//", pchar, "*)?(", pchar, "|/)*(\\?(", pchar, "|[/?])*)?(#(", pchar, "|[/?])*)?"});
  }
  return std::nullopt;
}

}  // namespace deepinfer::grammar
