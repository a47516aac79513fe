// Private to src/model/arch: the GGUF hyperparameters every transformer decoder reads the same
// way (<arch>.embedding_length, block_count, head counts and key length, rope dimensions and
// base, norm epsilon, context length; the vocabulary from token_embd, a tied head when there is
// no output.weight), checked for the shapes the CPU kernels accept. Each architecture reads
// what is its own (rope style and scaling, windows, biases) after this.
#pragma once

#include "deepinfer/status.h"
#include "model/loader/tensor_source.h"
#include "model/model.h"

namespace deepinfer {

// feed_forward_length is optional (MoE models may have no dense FFN): 0 when absent.
// `default_rms_eps` where the file names none: llama.cpp's defaults differ by architecture.
Status read_common_hparams(const TensorSource& source, double default_rms_eps, ModelConfig* config);

}  // namespace deepinfer
