// The system_fingerprint of output lines: which llmq and which model files produced them.
#pragma once

#include <string>

namespace llmq {

// "fp_llmq-<version>_<16 hex>": the hex is SHA-256 over the version and, for every regular file
// directly in `model_dir` in name order, its name, its size and its bytes; of a file over 16 MiB
// (weights) its first and last MiB and 64 evenly spaced 64 KiB pieces, so that start-up reads a few
// MiB whatever the model's size (a safetensors header, which names every tensor, lies in its
// first bytes). Files that cannot be read count by name and size.
std::string ModelFingerprint(const std::string& model_dir);

}  // namespace llmq
