// deepinfer tokenize / detokenize: the model's tokenizer on its own.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/thread_pool.h"
#include "model/catalog.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_loading.h"

namespace deepinfer::cli {

namespace {

const char* kTokenizeUsage = R"(usage: deepinfer tokenize [-m MODEL | --tokenizer FILE] [--ids | --pieces] [--special] [--bos] TEXT
       deepinfer tokenize [-m MODEL | --tokenizer FILE] --file PATH [--threads N] [--stats [--repeat R]]
  Prints the token ids of TEXT (default and --ids: "1,2,3"), or one line per token with its id
  and vocabulary text as JSON strings (--pieces).
  -m, --model MODEL   a model name or path (GGUF file or Hugging Face directory)
  --tokenizer FILE    a tokenizer.json, a directory holding one, or a GGUF file
  --special           spellings of control tokens in TEXT become those tokens (trusted text only)
  --bos               add the tokens the tokenizer puts around a sequence (BOS)
  --file PATH         read the text from a file instead of TEXT
  --threads N         encode long text on N threads (default 1; same ids)
  --stats             print {"bytes", "tokens", "seconds", "mb_per_s"} (best of --repeat R runs,
                      loading excluded) as JSON instead of the ids
)";

const char* kDetokenizeUsage = R"(usage: deepinfer detokenize [-m MODEL | --tokenizer FILE] IDS
  Prints the text of the comma-separated token ids IDS (control tokens render as nothing).
  -m, --model MODEL   a model name or path (GGUF file or Hugging Face directory)
  --tokenizer FILE    a tokenizer.json, a directory holding one, or a GGUF file
)";

Result<std::shared_ptr<const Tokenizer>> tokenizer_from_args(const Args& args) {
  if (auto file = args.get("--tokenizer")) return load_tokenizer(*file, TokenizerPresence::kRequired);
  const auto model = args.get("--model");
  DI_ASSIGN_OR_RETURN(const std::string path,
                      resolve_model_path(model ? *model : std::string(kDefaultModelName)));
  return load_tokenizer(path, TokenizerPresence::kRequired);
}

}  // namespace

int tokenize_command(const std::vector<std::string>& argv) {
  FlagSpec spec;
  spec.with_value = {"--model", "--tokenizer", "--file", "--threads", "--repeat"};
  spec.switches = {"--ids", "--pieces", "--special", "--bos", "--stats", "--help"};
  spec.aliases = {{"-m", "--model"}, {"-h", "--help"}};
  auto parsed = Args::parse(argv, spec);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + kTokenizeUsage, 2);
  const Args& args = *parsed;
  if (args.has("--help")) {
    std::fputs(kTokenizeUsage, stdout);
    return 0;
  }
  const size_t n_text = args.has("--file") ? 0 : 1;
  if (args.positional().size() != n_text) {
    return fail(std::string(n_text ? "expected one TEXT argument\n" : "--file replaces TEXT\n") + kTokenizeUsage, 2);
  }
  if (args.has("--ids") && args.has("--pieces")) return fail("--ids and --pieces exclude each other", 2);
  auto threads = args.get_int("--threads", 1);
  auto repeat = args.get_int("--repeat", 1);
  if (!threads.ok()) return fail(threads.status().message(), 2);
  if (!repeat.ok()) return fail(repeat.status().message(), 2);
  if (*threads < 1 || *threads > 1024) return fail("--threads must be between 1 and 1024", 2);
  if (*repeat < 1) return fail("--repeat must be >= 1", 2);
  std::string text;
  if (auto file = args.get("--file")) {
    std::ifstream in(*file, std::ios::binary);
    if (!in) return fail(*file + ": cannot open the file");
    std::ostringstream buffer;
    buffer << in.rdbuf();
    text = buffer.str();
  } else {
    text = args.positional()[0];
  }
  auto tok = tokenizer_from_args(args);
  if (!tok.ok()) return fail(tok.status().message());
  EncodeOptions options;
  options.add_bos = args.has("--bos");
  options.parse_special = args.has("--special");
  ThreadPool pool(static_cast<int>(*threads));
  std::vector<int32_t> ids;
  double best = 1e300;
  for (int64_t r = 0; r < *repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    ids = *threads > 1 ? (*tok)->encode_parallel(text, options, pool) : (*tok)->encode(text, options);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  if (args.has("--stats")) {
    nlohmann::json stats = {{"bytes", text.size()}, {"tokens", ids.size()}, {"seconds", best},
                            {"mb_per_s", static_cast<double>(text.size()) / 1e6 / best}, {"threads", *threads}};
    std::puts(stats.dump().c_str());
    return 0;
  }
  if (args.has("--pieces")) {
    for (int32_t id : ids) {
      const std::string text = nlohmann::json((*tok)->token_text(id)).dump(-1, ' ', false,
                                                                          nlohmann::json::error_handler_t::replace);
      std::printf("%d %s\n", id, text.c_str());
    }
    return 0;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) line += ',';
    line += std::to_string(ids[i]);
  }
  std::puts(line.c_str());
  return 0;
}

int detokenize_command(const std::vector<std::string>& argv) {
  FlagSpec spec;
  spec.with_value = {"--model", "--tokenizer"};
  spec.switches = {"--help"};
  spec.aliases = {{"-m", "--model"}, {"-h", "--help"}};
  auto parsed = Args::parse(argv, spec);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + kDetokenizeUsage, 2);
  const Args& args = *parsed;
  if (args.has("--help")) {
    std::fputs(kDetokenizeUsage, stdout);
    return 0;
  }
  if (args.positional().size() != 1) return fail(std::string("expected one IDS argument\n") + kDetokenizeUsage, 2);
  auto ids = parse_token_list(args.positional()[0], "IDS");
  if (!ids.ok()) return fail(ids.status().message(), 2);
  auto tok = tokenizer_from_args(args);
  if (!tok.ok()) return fail(tok.status().message());
  for (size_t i = 0; i < ids->size(); ++i) {
    const int32_t id = (*ids)[i];
    if (id < 0 || id >= (*tok)->n_vocab()) {
      return fail("IDS[" + std::to_string(i) + "] = " + std::to_string(id) + " is outside the vocabulary of " +
                  std::to_string((*tok)->n_vocab()) + " tokens", 2);
    }
  }
  const std::string text = (*tok)->decode(*ids);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace deepinfer::cli
