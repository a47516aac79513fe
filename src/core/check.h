// Invariant checks. DI_ICHECK aborts with file:line when an invariant of the program itself is
// broken (never for bad user input: that is a Status). DI_DCHECK is compiled out in release.
#pragma once

#include <cstdio>
#include <cstdlib>

#define DI_ICHECK(cond)                                                             \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)

#ifdef NDEBUG
#define DI_DCHECK(cond) \
  do {                  \
  } while (0)
#else
#define DI_DCHECK(cond) DI_ICHECK(cond)
#endif
