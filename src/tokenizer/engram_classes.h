// DeepSeek V4.1's Engram classes of a vocabulary: tokens whose text is the same after
// normalisation share a class (the Engram layers hash n-grams of classes, not of token ids).
#pragma once

#include <cstdint>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace deepinfer {

// Per token id, its class: classes are numbered in order of their first token. A token's text
// is what decoding it alone gives (special tokens as their text), normalised by NFKC, NFD,
// dropping marks, lowercasing, folding runs of space, tab, CR and LF into one space and
// stripping the ends (a lone space stays). Text holding U+FFFD (bytes that are not UTF-8 on
// their own) is keyed by the raw vocabulary string instead; empty normalised text by the text.
// As the release's inference/engram.py (via NeMo Automodel's port): 99,092 classes for
// DeepSeek V4's 129,280-token vocabulary.
std::vector<int32_t> engram_token_classes(const Tokenizer& tokenizer, int64_t* n_classes);

}  // namespace deepinfer
