// Sparse x dense products over a BCOO matrix whose entries are sorted by row (a CSR view), and
// over a CSR matrix:
//
// - hlopt_bcoo_spmm: out[M(, N)] = A @ x for A = BCOO(data[nse], indices[nse, 2]) of shape [M, K]
//   and a dense x[K] (SpMV) or x[K, N] (SpMM); M is out's first dimension, K is x's.
// - hlopt_bcoo_sddmm: out[nse] = (P @ Q)[indices] for P[M, K] and Q given transposed, qt[N, K].
// - hlopt_csr_spmm: out[M(, N)] = A @ x for A = CSR(data[nse], indices[nse], indptr[M + 1]) of
//   shape [M, K] (JAX's BCSR): row r holds entries [indptr[r], indptr[r + 1]). It streams 8 bytes
//   an entry (f32 value, i32 column) where the BCOO kernel streams 12. indptr must be
//   non-decreasing from indptr[0] >= 0 to indptr[M] <= nse (entries outside [indptr[0], indptr[M])
//   are padding); the kernel checks each pointer before it reads the row, and refuses (an error,
//   nothing read out of bounds) an indptr that is not.
//
// Entries follow JAX's BCOO rules: one whose row or column is outside the shape (padding,
// negative, past the end) adds nothing (SDDMM: reads nothing and gives 0), duplicates add up.
// Every buffer's shape and type are checked against the others before anything is read, and
// every index against the shape before it is used: a hostile program's operands cannot make a
// kernel read or write out of bounds.
//
// SpMM walks each block of rows once: row pointers come from binary searches of the sorted
// rows at the block boundaries, and the walk checks that every entry of the block belongs to
// it. Entries not sorted by row are still summed right, by a serial pass (slower, never
// wrong). Blocks of about equal nse run on XLA:CPU's intra-op thread pool.
//
// An SpMV whose x is larger than a core's L2 cache prefetches the entries and x ahead (far_x
// below).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include "parallel.h"
#include "registry.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace hlopt {
namespace {

// Multiply-adds per parallel block (entries x dense columns), about a millisecond of work: a
// product smaller than that runs on the caller alone. On a machine with more runnable threads
// than cores, a helper preempted inside its block makes the caller wait for the rest of its
// time slice (milliseconds), which smaller blocks turned into a loss (bench/sparse_scipy.py).
constexpr int64_t kBlockWork = 1 << 21;

// Work (entries + rows, times columns) per parallel block of the CSR kernel and of the BCOO
// SpMV, a quarter of kBlockWork's: an SpMV of 1e5 rows x 10 entries splits over two threads (with kBlockWork
// it would stay on one, though an SpMV that size is already worth splitting). Larger blocks
// gain nothing there; smaller ones (a 1e4-row SpMV split) pay more in waking and waiting for
// helpers than the split saves, above all when other processes share the cores.
// bench/sparse_scipy.py measures it; records in bench/results/.
constexpr int64_t kCsrBlockWork = 1 << 19;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// One copy compiled for AVX2 + FMA machines, one for any x86-64; the loader picks one at startup
// (so a built wheel runs on any x86-64 machine).
#define HLOPT_MULTIVERSION __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define HLOPT_MULTIVERSION
#endif

// A loop that the multiversioned functions call must be inlined into each of their copies (else
// every copy calls one for the default ISA): GCC does not inline rows_block, which holds both
// SpMV loops, on its own, and a call into the default copy loses the AVX2 + FMA code.
#if defined(__GNUC__)
#define HLOPT_LOOP inline __attribute__((always_inline))
#else
#define HLOPT_LOOP inline
#endif

// SpMV with an x larger than a core's L2 cache (`far_x`): each entry's x[column] then misses L2
// about as often as x is larger than it, and a row's gathers wait on each other's misses. Two
// prefetches for it, in the row loops below:
// - the entries' arrays kStreamAhead entries ahead, into L1 (prefetcht0);
// - x[column of entry e + kGatherAhead] into L1, so the gathers of entries not yet reached are
//   in flight together.
// Together they overlap the misses of the entries' stream and of x's gathers; the gather
// prefetch pays only beside the stream's. The stream goes into L1 rather than being prefetched
// non-temporally (prefetchnta, meant to keep it out of L2 for x), which the gathers of the next
// entries want close. With x inside L2 the prefetches are pure overhead (the stream then stays
// cached from one call to the next), so those SpMVs never take this path.
// bench/sparse_scipy.py measures it; records in bench/results/.
constexpr int64_t kStreamAhead = 256;
constexpr int64_t kGatherAhead = 64;

// Bytes of a core's L2 cache (1 MiB when the system does not say).
int64_t l2_bytes() {
  static const int64_t bytes = [] {
#ifdef _SC_LEVEL2_CACHE_SIZE
    const long b = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (b > 0) return static_cast<int64_t>(b);
#endif
    return int64_t{1} << 20;
  }();
  return bytes;
}

// Whether an SpMV gathers from an x of k elements of `size` bytes that does not fit L2.
inline bool far_x(int64_t k, size_t size) { return static_cast<double>(k) * size > static_cast<double>(l2_bytes()); }

// Prefetches (into L1) of data[e] and col[stride * e] for e in [*next, end), a cache line of
// the wider array at a time; *next moves to the first entry not prefetched (at least `from`).
template <typename T, int stride>
inline void prefetch_stream(const T* data, const int32_t* col, int64_t& next, int64_t from, int64_t end) {
  constexpr int64_t line = 64 / std::max<int64_t>(sizeof(T), stride * sizeof(int32_t));
  if (next < from) next = from;
  for (; next < end; next += line) {
    __builtin_prefetch(data + next, 0, 3);
    __builtin_prefetch(col + stride * next, 0, 3);
  }
}

// Prefetch of x[column of entry e] (clamped into x: the column is not checked yet); k >= 1.
template <typename T, int stride>
inline void prefetch_x(const int32_t* col, const T* x, uint32_t k, int64_t e) {
  __builtin_prefetch(x + std::min(static_cast<uint32_t>(col[stride * e]), k - 1), 0, 3);
}

inline bool in_range(int32_t i, int64_t size) {
  return i >= 0 && static_cast<int64_t>(i) < size;
}

std::string dims_text(ffi::AnyBuffer::Dimensions dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

// Columns are compared unsigned against ku = min(k, 2^31) (a negative one wraps above every k).
inline uint32_t column_bound(int64_t k) { return static_cast<uint32_t>(std::min<int64_t>(k, int64_t{1} << 31)); }

// acc += data[e] * x[column of e] when the column is in [0, k); `stride` is 1 for CSR's columns,
// 2 for BCOO's (row, column) pairs (col points at the first column). A branch, not a select: it
// is taken for every column of a well-formed matrix, so it predicts, and the load of x then waits
// on the column alone; the processor runs ahead into the next entries and rows and overlaps their
// gathers. The branch-free form (x[ok ? c : 0]) would make every gather wait on the compare
// too, which is slower, most of all when x is larger than a core's cache. Software prefetching
// of x does not make up for that, and on this form it gains only together with the prefetch of
// the entries' stream (far_x, above). bench/sparse_scipy.py measures it.
template <typename T, int stride>
inline void spmv_add(T& acc, const T* __restrict data, const int32_t* __restrict col, const T* __restrict x,
                     uint32_t k, int64_t e) {
  const uint32_t c = static_cast<uint32_t>(col[stride * e]);
  if (__builtin_expect(c < k, 1)) acc += data[e] * x[c];
}

// The sum of entries [p0, p1) of one row times x, in two sums (the adds of a row overlap); with
// `ahead`, each entry first prefetches the x of the entry kGatherAhead later (which must exist).
template <typename T, int stride, bool ahead = false>
inline T spmv_row(const T* __restrict data, const int32_t* __restrict col, const T* __restrict x, uint32_t k,
                  int64_t p0, int64_t p1) {
  T a0 = 0, a1 = 0;
  int64_t e = p0;
  for (; e + 2 <= p1; e += 2) {
    if constexpr (ahead) {
      prefetch_x<T, stride>(col, x, k, e + kGatherAhead);
      prefetch_x<T, stride>(col, x, k, e + 1 + kGatherAhead);
    }
    spmv_add<T, stride>(a0, data, col, x, k, e);
    spmv_add<T, stride>(a1, data, col, x, k, e + 1);
  }
  if (e < p1) {
    if constexpr (ahead) prefetch_x<T, stride>(col, x, k, e + kGatherAhead);
    spmv_add<T, stride>(a0, data, col, x, k, e);
  }
  return a0 + a1;
}

// The first entry in [lo, hi) whose row is >= r, if rows are sorted (in [lo, hi) otherwise).
int64_t lower_bound_row(const int32_t* idx, int64_t lo, int64_t hi, int64_t r) {
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (static_cast<int64_t>(idx[2 * mid]) < r) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// SpMV rows [r0, r1) from entries [e, e1) as rows_block below; with `far` (far_x), the
// prefetches of the x gathers (of entries before nse) and of the entries' stream (before e1).
template <typename T, bool far>
HLOPT_LOOP int64_t spmv_rows_block(const T* __restrict data, const int32_t* __restrict idx, const T* __restrict x,
                               T* __restrict out, uint32_t ku, int64_t nse, int64_t r0, int64_t r1, int64_t e,
                               int64_t e1) {
  // Two entries at a time while both are in the row (two sums, as CSR's rows), then the last.
  const int32_t* __restrict col = idx + 1;
  int64_t next = e;  // the first entry whose stream is not prefetched yet
  for (int64_t r = r0; r < r1; ++r) {
    if constexpr (far) prefetch_stream<T, 2>(data, idx, next, e, std::min(e + kStreamAhead, e1));
    T a0 = 0, a1 = 0;
    while (e + 2 <= e1 && ((idx[2 * e] == r) & (idx[2 * e + 2] == r))) {
      if constexpr (far) {
        if (e + 1 + kGatherAhead < nse) {
          prefetch_x<T, 2>(col, x, ku, e + kGatherAhead);
          prefetch_x<T, 2>(col, x, ku, e + 1 + kGatherAhead);
        }
      }
      spmv_add<T, 2>(a0, data, col, x, ku, e);
      spmv_add<T, 2>(a1, data, col, x, ku, e + 1);
      e += 2;
    }
    if (e < e1 && static_cast<int64_t>(idx[2 * e]) == r) spmv_add<T, 2>(a0, data, col, x, ku, e++);
    out[r] = a0 + a1;
  }
  return e;
}

// out[r, :] for rows [r0, r1) from entries [e0, e1), which must hold exactly those rows' entries
// in row order; false if they do not (then the rows written are wrong and the caller redoes them).
// ku = column_bound(k); nse: the number of entries; far: far_x (SpMV only).
template <typename T>
HLOPT_LOOP bool rows_block(const T* __restrict data, const int32_t* __restrict idx, const T* __restrict x,
                       T* __restrict out, uint32_t ku, int64_t n, int64_t nse, bool far, int64_t r0, int64_t r1,
                       int64_t e0, int64_t e1) {
  int64_t e = e0;
  if (n == 1) {
    e = far ? spmv_rows_block<T, true>(data, idx, x, out, ku, nse, r0, r1, e0, e1)
            : spmv_rows_block<T, false>(data, idx, x, out, ku, nse, r0, r1, e0, e1);
    return e == e1;
  }
  for (int64_t r = r0; r < r1; ++r) {
    T* __restrict o = out + r * n;
    for (int64_t j = 0; j < n; ++j) o[j] = 0;
    for (; e < e1 && static_cast<int64_t>(idx[2 * e]) == r; ++e) {
      const uint32_t c = static_cast<uint32_t>(idx[2 * e + 1]);
      if (c >= ku) continue;
      const T v = data[e];
      const T* __restrict xr = x + static_cast<int64_t>(c) * n;
      for (int64_t j = 0; j < n; ++j) o[j] += v * xr[j];
    }
  }
  return e == e1;
}

HLOPT_MULTIVERSION bool rows_block_f32(const float* data, const int32_t* idx, const float* x, float* out,
                                       uint32_t ku, int64_t n, int64_t nse, bool far, int64_t r0, int64_t r1,
                                       int64_t e0, int64_t e1) {
  return rows_block(data, idx, x, out, ku, n, nse, far, r0, r1, e0, e1);
}

HLOPT_MULTIVERSION bool rows_block_f64(const double* data, const int32_t* idx, const double* x, double* out,
                                       uint32_t ku, int64_t n, int64_t nse, bool far, int64_t r0, int64_t r1,
                                       int64_t e0, int64_t e1) {
  return rows_block(data, idx, x, out, ku, n, nse, far, r0, r1, e0, e1);
}

inline bool rows_block_typed(const float* d, const int32_t* i, const float* x, float* o, uint32_t ku, int64_t n,
                             int64_t nse, bool far, int64_t r0, int64_t r1, int64_t e0, int64_t e1) {
  return rows_block_f32(d, i, x, o, ku, n, nse, far, r0, r1, e0, e1);
}
inline bool rows_block_typed(const double* d, const int32_t* i, const double* x, double* o, uint32_t ku, int64_t n,
                             int64_t nse, bool far, int64_t r0, int64_t r1, int64_t e0, int64_t e1) {
  return rows_block_f64(d, i, x, o, ku, n, nse, far, r0, r1, e0, e1);
}

// Any order: zero the output, then add every in-range entry into its row.
template <typename T>
void unsorted_spmm(const T* data, const int32_t* idx, const T* x, T* out, int64_t nse, int64_t m, int64_t k,
                   int64_t n) {
  std::memset(out, 0, sizeof(T) * static_cast<size_t>(m * n));
  for (int64_t e = 0; e < nse; ++e) {
    const int32_t r = idx[2 * e], c = idx[2 * e + 1];
    if (!in_range(r, m) || !in_range(c, k)) continue;
    const T v = data[e];
    T* o = out + static_cast<int64_t>(r) * n;
    const T* xr = x + static_cast<int64_t>(c) * n;
    for (int64_t j = 0; j < n; ++j) o[j] += v * xr[j];
  }
}

template <typename T>
void spmm(ffi::ThreadPool& pool, const T* data, const int32_t* idx, const T* x, T* out, int64_t nse, int64_t m,
          int64_t k, int64_t n) {
  // Sorted rows: [lo, hi) are the entries of rows 0..m-1, those before have negative rows, those
  // after rows >= m (padding). Checked below; any other order takes the serial pass.
  const int64_t lo = lower_bound_row(idx, 0, nse, 0);
  const int64_t hi = lower_bound_row(idx, lo, nse, m);
  bool sorted = true;
  for (int64_t e = 0; e < lo && sorted; ++e) sorted = idx[2 * e] < 0;
  for (int64_t e = hi; e < nse && sorted; ++e) sorted = static_cast<int64_t>(idx[2 * e]) >= m;
  if (!sorted || m == 0) {
    if (m > 0 && n > 0) unsorted_spmm(data, idx, x, out, nse, m, k, n);
    return;
  }
  if (n == 0) return;
  if (k == 0) {  // no column is in range: every row is 0
    std::memset(out, 0, sizeof(T) * static_cast<size_t>(m * n));
    return;
  }
  const uint32_t ku = column_bound(k);
  // Block b holds rows [row[b], row[b+1]), starting at about entry lo + b * (hi - lo) / blocks.
  // In double: (hi - lo) * n may not fit in int64 for a hostile program's shapes.
  const double work = static_cast<double>(hi - lo + m) * static_cast<double>(n);
  const double block_work = n == 1 ? kCsrBlockWork : kBlockWork;
  const int64_t blocks = static_cast<int64_t>(std::max(1.0, std::min(static_cast<double>(m),
                                                                     work / block_work + 1.0)));
  std::vector<int64_t> row(blocks + 1), start(blocks + 1);
  row[0] = 0;
  row[blocks] = m;
  for (int64_t b = 1; b < blocks; ++b) {
    const int64_t e = lo + (hi - lo) * b / blocks;
    const int64_t r = e < hi ? static_cast<int64_t>(idx[2 * e]) : m;
    row[b] = std::min(m, std::max(row[b - 1], r));
  }
  start[0] = lo;
  start[blocks] = hi;
  for (int64_t b = 1; b < blocks; ++b) start[b] = lower_bound_row(idx, lo, hi, row[b]);
  std::atomic<bool> ok{true};
  const bool far = n == 1 && far_x(k, sizeof(T));
  auto body = [&](int64_t b) {
    if (!rows_block_typed(data, idx, x, out, ku, n, nse, far, row[b], row[b + 1], start[b], start[b + 1])) {
      ok.store(false, std::memory_order_relaxed);
    }
  };
  parallel_for(pool, blocks, body);
  if (!ok.load()) unsorted_spmm(data, idx, x, out, nse, m, k, n);
}

ffi::Error spmm_impl(ffi::ThreadPool pool, ffi::AnyBuffer data, ffi::Buffer<ffi::S32> indices, ffi::AnyBuffer x,
                     ffi::Result<ffi::AnyBuffer> out) {
  const auto ddims = data.dimensions(), idims = indices.dimensions(), xdims = x.dimensions(),
             odims = out->dimensions();
  const ffi::DataType t = data.element_type();
  if (t != ffi::F32 && t != ffi::F64) {
    return ffi::Error::InvalidArgument("hlopt_bcoo_spmm: data must be f32 or f64");
  }
  if (x.element_type() != t || out->element_type() != t) {
    return ffi::Error::InvalidArgument("hlopt_bcoo_spmm: data, x and the result must have one element type");
  }
  if (ddims.size() != 1 || idims.size() != 2 || idims[0] != ddims[0] || idims[1] != 2) {
    return ffi::Error::InvalidArgument("hlopt_bcoo_spmm: needs data[nse] and indices[nse, 2], got data" +
                                       dims_text(ddims) + " and indices" + dims_text(idims));
  }
  const bool matrix = xdims.size() == 2;
  if ((xdims.size() != 1 && !matrix) || odims.size() != xdims.size() || (matrix && odims[1] != xdims[1])) {
    return ffi::Error::InvalidArgument("hlopt_bcoo_spmm: needs x[K] and a result [M], or x[K, N] and a result "
                                       "[M, N], got x" + dims_text(xdims) + " and a result" + dims_text(odims));
  }
  const int64_t nse = ddims[0], m = odims[0], k = xdims[0], n = matrix ? xdims[1] : 1;
  const int32_t* idx = indices.typed_data();
  if (t == ffi::F32) {
    spmm(pool, static_cast<const float*>(data.untyped_data()), idx, static_cast<const float*>(x.untyped_data()),
         static_cast<float*>(out->untyped_data()), nse, m, k, n);
  } else {
    spmm(pool, static_cast<const double*>(data.untyped_data()), idx, static_cast<const double*>(x.untyped_data()),
         static_cast<double*>(out->untyped_data()), nse, m, k, n);
  }
  return ffi::Error::Success();
}

template <typename T>
inline void sddmm_block(const T* __restrict p, const T* __restrict qt, const int32_t* __restrict idx,
                        T* __restrict out, int64_t m, int64_t n, int64_t k, int64_t e0, int64_t e1) {
  for (int64_t e = e0; e < e1; ++e) {
    const int32_t r = idx[2 * e], c = idx[2 * e + 1];
    if (!in_range(r, m) || !in_range(c, n)) {
      out[e] = 0;
      continue;
    }
    const T* __restrict a = p + static_cast<int64_t>(r) * k;
    const T* __restrict b = qt + static_cast<int64_t>(c) * k;
    T acc = 0;
    for (int64_t j = 0; j < k; ++j) acc += a[j] * b[j];
    out[e] = acc;
  }
}

HLOPT_MULTIVERSION void sddmm_block_f32(const float* p, const float* qt, const int32_t* idx, float* out, int64_t m,
                                        int64_t n, int64_t k, int64_t e0, int64_t e1) {
  sddmm_block(p, qt, idx, out, m, n, k, e0, e1);
}

HLOPT_MULTIVERSION void sddmm_block_f64(const double* p, const double* qt, const int32_t* idx, double* out,
                                        int64_t m, int64_t n, int64_t k, int64_t e0, int64_t e1) {
  sddmm_block(p, qt, idx, out, m, n, k, e0, e1);
}

inline void sddmm_block_typed(const float* p, const float* qt, const int32_t* idx, float* out, int64_t m,
                              int64_t n, int64_t k, int64_t e0, int64_t e1) {
  sddmm_block_f32(p, qt, idx, out, m, n, k, e0, e1);
}
inline void sddmm_block_typed(const double* p, const double* qt, const int32_t* idx, double* out, int64_t m,
                              int64_t n, int64_t k, int64_t e0, int64_t e1) {
  sddmm_block_f64(p, qt, idx, out, m, n, k, e0, e1);
}

template <typename T>
void sddmm(ffi::ThreadPool& pool, const T* p, const T* qt, const int32_t* idx, T* out, int64_t nse, int64_t m,
           int64_t n, int64_t k) {
  const int64_t per_block = std::max<int64_t>(1, kBlockWork / std::max<int64_t>(k, 1));
  const int64_t blocks = (nse + per_block - 1) / per_block;
  auto body = [&](int64_t b) {
    sddmm_block_typed(p, qt, idx, out, m, n, k, b * per_block, std::min(nse, (b + 1) * per_block));
  };
  parallel_for(pool, blocks, body);
}

ffi::Error sddmm_impl(ffi::ThreadPool pool, ffi::AnyBuffer p, ffi::AnyBuffer qt, ffi::Buffer<ffi::S32> indices,
                      ffi::Result<ffi::AnyBuffer> out) {
  const auto pdims = p.dimensions(), qdims = qt.dimensions(), idims = indices.dimensions(),
             odims = out->dimensions();
  const ffi::DataType t = p.element_type();
  if ((t != ffi::F32 && t != ffi::F64) || qt.element_type() != t || out->element_type() != t) {
    return ffi::Error::InvalidArgument("hlopt_bcoo_sddmm: p, qt and the result must be all f32 or all f64");
  }
  if (pdims.size() != 2 || qdims.size() != 2 || pdims[1] != qdims[1] || idims.size() != 2 || idims[1] != 2 ||
      odims.size() != 1 || odims[0] != idims[0]) {
    return ffi::Error::InvalidArgument("hlopt_bcoo_sddmm: needs p[M, K], qt[N, K], indices[nse, 2] and a result "
                                       "[nse], got p" + dims_text(pdims) + ", qt" + dims_text(qdims) +
                                       ", indices" + dims_text(idims) + " and a result" + dims_text(odims));
  }
  const int64_t nse = idims[0], m = pdims[0], n = qdims[0], k = pdims[1];
  const int32_t* idx = indices.typed_data();
  if (t == ffi::F32) {
    sddmm(pool, static_cast<const float*>(p.untyped_data()), static_cast<const float*>(qt.untyped_data()), idx,
          static_cast<float*>(out->untyped_data()), nse, m, n, k);
  } else {
    sddmm(pool, static_cast<const double*>(p.untyped_data()), static_cast<const double*>(qt.untyped_data()), idx,
          static_cast<double*>(out->untyped_data()), nse, m, n, k);
  }
  return ffi::Error::Success();
}

// ---------------------------------------------------------------------------
// CSR


// Rows [r0, r1) of out; -1 when every pointer read fit (indptr[r0] in [0, nse], each next one in
// [previous, nse]), else the first row whose pointers did not, a row in [r0, r1) (its row and those
// after are not written). An empty range reads no pointer: the range that ends at its r0 checks it.
// With `far` (SpMV only, far_x): the prefetches of the entries' stream and of the x gathers.
template <typename T, bool far>
HLOPT_LOOP int64_t csr_rows(const T* __restrict data, const int32_t* __restrict col, const int32_t* __restrict ptr,
                        const T* __restrict x, T* __restrict out, int64_t nse, uint32_t k, int64_t n, int64_t r0,
                        int64_t r1) {
  if (r0 >= r1) return -1;
  int64_t p0 = ptr[r0];
  if (p0 < 0 || p0 > nse) return r0;
  int64_t next = p0;  // the first entry whose stream is not prefetched yet
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t p1 = ptr[r + 1];
    if (p1 < p0 || p1 > nse) return r;
    if constexpr (far) {
      prefetch_stream<T, 1>(data, col, next, p0, std::min(p0 + kStreamAhead, nse));
      out[r] = p1 + kGatherAhead <= nse ? spmv_row<T, 1, true>(data, col, x, k, p0, p1)
                                        : spmv_row<T, 1>(data, col, x, k, p0, p1);
    } else if (n == 1) {
      out[r] = spmv_row<T, 1>(data, col, x, k, p0, p1);
    } else {
      T* __restrict o = out + r * n;
      for (int64_t j = 0; j < n; ++j) o[j] = 0;
      for (int64_t e = p0; e < p1; ++e) {
        const uint32_t c = static_cast<uint32_t>(col[e]);
        if (c >= k) continue;
        const T v = data[e];
        const T* __restrict xr = x + static_cast<int64_t>(c) * n;
        for (int64_t j = 0; j < n; ++j) o[j] += v * xr[j];
      }
    }
    p0 = p1;
  }
  return -1;
}

// `far` only with n == 1 (an SpMV).
HLOPT_MULTIVERSION int64_t csr_rows_f32(const float* data, const int32_t* col, const int32_t* ptr, const float* x,
                                        float* out, int64_t nse, uint32_t k, int64_t n, bool far, int64_t r0,
                                        int64_t r1) {
  return far ? csr_rows<float, true>(data, col, ptr, x, out, nse, k, n, r0, r1)
             : csr_rows<float, false>(data, col, ptr, x, out, nse, k, n, r0, r1);
}

HLOPT_MULTIVERSION int64_t csr_rows_f64(const double* data, const int32_t* col, const int32_t* ptr, const double* x,
                                        double* out, int64_t nse, uint32_t k, int64_t n, bool far, int64_t r0,
                                        int64_t r1) {
  return far ? csr_rows<double, true>(data, col, ptr, x, out, nse, k, n, r0, r1)
             : csr_rows<double, false>(data, col, ptr, x, out, nse, k, n, r0, r1);
}

inline int64_t csr_rows_typed(const float* d, const int32_t* c, const int32_t* p, const float* x, float* o,
                              int64_t nse, uint32_t k, int64_t n, bool far, int64_t r0, int64_t r1) {
  return csr_rows_f32(d, c, p, x, o, nse, k, n, far, r0, r1);
}
inline int64_t csr_rows_typed(const double* d, const int32_t* c, const int32_t* p, const double* x, double* o,
                              int64_t nse, uint32_t k, int64_t n, bool far, int64_t r0, int64_t r1) {
  return csr_rows_f64(d, c, p, x, o, nse, k, n, far, r0, r1);
}

// The first row r whose work (its entries and rows before it, ptr[r] - ptr[0] + r) reaches
// `target`, for a non-decreasing ptr (any ptr: some row in [0, m], the caller keeps them ordered).
int64_t csr_split(const int32_t* ptr, int64_t m, double target) {
  int64_t lo = 0, hi = m;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (static_cast<double>(ptr[mid]) - ptr[0] + static_cast<double>(mid) < target) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// -1 if the product was written, else a row in [0, m) whose pointers are out of order or range.
template <typename T>
int64_t csr_spmm(ffi::ThreadPool& pool, const T* data, const int32_t* col, const int32_t* ptr, const T* x, T* out,
                 int64_t nse, int64_t m, int64_t k, int64_t n) {
  if (m == 0 || n == 0) return -1;
  if (k == 0) {  // no column is in range: every row is 0 (the pointers are still checked)
    for (int64_t r = 0; r <= m; ++r) {
      if (ptr[r] < (r ? ptr[r - 1] : 0) || ptr[r] > nse) return std::max<int64_t>(r - 1, 0);
    }
    std::memset(out, 0, sizeof(T) * static_cast<size_t>(m * n));
    return -1;
  }
  const uint32_t ku = column_bound(k);
  // Blocks of about equal work (entries + rows) x columns, in double: a hostile program's pointers
  // and shapes may not fit int64 products.
  const double entries = std::max(0.0, static_cast<double>(ptr[m]) - ptr[0]);
  const double total = entries + static_cast<double>(m);
  const int64_t blocks = static_cast<int64_t>(std::max(1.0, std::min(static_cast<double>(m),
                                                                     total * static_cast<double>(n) / kCsrBlockWork)));
  std::vector<int64_t> row(blocks + 1);
  row[0] = 0;
  row[blocks] = m;
  for (int64_t b = 1; b < blocks; ++b) {
    row[b] = std::min(m, std::max(row[b - 1], csr_split(ptr, m, total * static_cast<double>(b) / blocks)));
  }
  std::atomic<int64_t> bad{-1};
  const bool far = n == 1 && far_x(k, sizeof(T));
  auto body = [&](int64_t b) {
    const int64_t r = csr_rows_typed(data, col, ptr, x, out, nse, ku, n, far, row[b], row[b + 1]);
    if (r >= 0) bad.store(r, std::memory_order_relaxed);
  };
  parallel_for(pool, blocks, body);
  return bad.load();
}

ffi::Error csr_spmm_impl(ffi::ThreadPool pool, ffi::AnyBuffer data, ffi::Buffer<ffi::S32> indices,
                         ffi::Buffer<ffi::S32> indptr, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> out) {
  const auto ddims = data.dimensions(), idims = indices.dimensions(), pdims = indptr.dimensions(),
             xdims = x.dimensions(), odims = out->dimensions();
  const ffi::DataType t = data.element_type();
  if ((t != ffi::F32 && t != ffi::F64) || x.element_type() != t || out->element_type() != t) {
    return ffi::Error::InvalidArgument("hlopt_csr_spmm: data, x and the result must be all f32 or all f64");
  }
  const bool matrix = xdims.size() == 2;
  if (ddims.size() != 1 || idims.size() != 1 || idims[0] != ddims[0] || (xdims.size() != 1 && !matrix) ||
      odims.size() != xdims.size() || (matrix && odims[1] != xdims[1]) || pdims.size() != 1 ||
      pdims[0] != odims[0] + 1) {
    return ffi::Error::InvalidArgument("hlopt_csr_spmm: needs data[nse], indices[nse], indptr[M + 1] and x[K] "
                                       "with a result [M], or x[K, N] with a result [M, N], got data" +
                                       dims_text(ddims) + ", indices" + dims_text(idims) + ", indptr" +
                                       dims_text(pdims) + ", x" + dims_text(xdims) + " and a result" +
                                       dims_text(odims));
  }
  const int64_t nse = ddims[0], m = odims[0], k = xdims[0], n = matrix ? xdims[1] : 1;
  const int32_t* col = indices.typed_data();
  const int32_t* ptr = indptr.typed_data();
  const int64_t bad = t == ffi::F32
      ? csr_spmm(pool, static_cast<const float*>(data.untyped_data()), col, ptr,
                 static_cast<const float*>(x.untyped_data()), static_cast<float*>(out->untyped_data()), nse, m, k, n)
      : csr_spmm(pool, static_cast<const double*>(data.untyped_data()), col, ptr,
                 static_cast<const double*>(x.untyped_data()), static_cast<double*>(out->untyped_data()), nse, m, k,
                 n);
  if (bad >= 0) {
    return ffi::Error::InvalidArgument(
        "hlopt_csr_spmm: indptr must be non-decreasing from indptr[0] >= 0 to indptr[M] <= nse = " +
        std::to_string(nse) + "; at row " + std::to_string(bad) + " indptr[row] = " + std::to_string(ptr[bad]) +
        " and indptr[row + 1] = " + std::to_string(ptr[bad + 1]));
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER(bcoo_spmm, spmm_impl,
                       (bind_pooled<ffi::AnyBuffer, ffi::Buffer<ffi::S32>, ffi::AnyBuffer>().Ret<ffi::AnyBuffer>()));

XLA_FFI_DEFINE_HANDLER(bcoo_sddmm, sddmm_impl,
                       (bind_pooled<ffi::AnyBuffer, ffi::AnyBuffer, ffi::Buffer<ffi::S32>>().Ret<ffi::AnyBuffer>()));

XLA_FFI_DEFINE_HANDLER(csr_spmm_ffi, csr_spmm_impl, ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::AnyBuffer>()
                       .Arg<ffi::Buffer<ffi::S32>>().Arg<ffi::Buffer<ffi::S32>>().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>());

HLOPT_REGISTER_HANDLER("hlopt_bcoo_spmm", bcoo_spmm);
HLOPT_REGISTER_HANDLER("hlopt_bcoo_sddmm", bcoo_sddmm);
HLOPT_REGISTER_HANDLER("hlopt_csr_spmm", csr_spmm_ffi);

}  // namespace
}  // namespace hlopt
