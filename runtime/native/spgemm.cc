// Sparse x sparse matrix product (SpGEMM) of two 2-d sparse matrices, CSR-style in two phases.
//
// Operands (lhs `rows x inner`, rhs `inner x cols`) come as BCOO buffers (`indices[nse, 2]` of
// (row, column) and `data[nse]`, no batch or dense dims). An entry whose index is out of range
// (padding, or anything else) is dropped, as JAX's BCOO treats them; duplicates add. Nothing from
// an operand is trusted: every index, count and size is checked before use.
//
// - hlopt_spgemm_count (symbolic phase, BCOO operands): `counts[runs]`, the output entries (distinct
//   columns summed over the rows) of each run of ceil(rows / runs) consecutive rows, 0 < runs <= rows
//   (none for no rows): the caller picks the length; a count per row is runs = rows. A run, not a
//   row, keeps the counts small: with long runs they are a small part of the program's memory
//   (the BCOO output, 12 bytes an entry in float32, is already 1.5 times a CSR one).
// - hlopt_spgemm_fill (numeric phase, BCOO operands and output): given `counts` of any run length
//   (checked against the operands' structure), the output's first `nse` entries in row-major order, columns
//   ascending within a row (`nse` is the result's size; padding after the last entry has index
//   (rows, cols) and value 0), the values summed in the data's type.
//
// Each phase takes one output row at a time with a dense marker over the output's columns (one
// per thread); a product of enough multiply-adds shares its rows out to the threads in ranges of
// about equal entries (the lhs's, and in the fill the output's), each thread taking the next range
// when done with its last. A row's columns are put in order by rank (a short row: vectors of
// columns compared with each column), by a bitmap over the columns (a long one) or by sorting,
// whichever costs least.

#include <algorithm>
#include <atomic>
#include <complex>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "parallel.h"
#include "registry.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// Work (multiply-adds) below which a range of rows is not split further.
constexpr int64_t kWorkPerBlock = 1 << 16;
// The most output columns: each thread keeps a marker, a running sum and a column per output column.
constexpr int64_t kMaxCols = int64_t{1} << 24;
// Rows with at most this many entries may be ordered by rank (quadratic, branch-free).
constexpr int64_t kRankSortMax = 256;

// One operand's rows as CSR: the in-range entries of row r are `k in [ptr[r], ptr[r+1])`, with
// column `col_data[k * stride]` and position `entries[k]` in the operand's buffers (for its data). Entries whose
// row or column is out of range are dropped. Buffers already in row order with every index in
// range are read in place (`identity`: entry k is k); others are grouped into `cols` and `entries`.
template <typename I>
struct Rows {
  std::vector<int64_t> ptr;
  const I* col_data = nullptr;  // entry k's column: col_data[k * stride]
  int64_t stride = 1;
  bool identity = false;
  std::vector<I> cols;
  std::vector<int64_t> entries;
};

// Whether COO indices[nse, 2] are in row order with every row in [0, n_rows) and every column in
// [0, n_cols): one pass of compares OR-ed together, no branch an entry (a loop that vectorizes).
template <typename I>
__attribute__((always_inline)) inline bool coo_in_order_impl(const I* __restrict idx, int64_t nse, I n_rows,
                                                             I n_cols) {
  if (nse == 0) return true;
  I bad = (idx[0] < 0) | (idx[0] >= n_rows) | (idx[1] < 0) | (idx[1] >= n_cols);
  for (int64_t k = 1; k < nse; ++k) {
    const I r = idx[2 * k], c = idx[2 * k + 1];
    bad |= (r < idx[2 * k - 2]) | (r >= n_rows) | (c < 0) | (c >= n_cols);
  }
  return bad == 0;
}

__attribute__((target_clones("avx2", "default"))) bool coo_in_order(const int32_t* idx, int64_t nse, int32_t n_rows,
                                                                     int32_t n_cols) {
  return coo_in_order_impl(idx, nse, n_rows, n_cols);
}

__attribute__((target_clones("avx2", "default"))) bool coo_in_order(const int64_t* idx, int64_t nse, int64_t n_rows,
                                                                     int64_t n_cols) {
  return coo_in_order_impl(idx, nse, n_rows, n_cols);
}

// Groups a COO operand's entries by row (a stable counting sort, or none when they are in row order).
template <typename I>
Rows<I> group_rows(const I* idx, int64_t nse, int64_t n_rows, int64_t n_cols) {
  Rows<I> rows;
  std::vector<int64_t>& ptr = rows.ptr;
  // In row order with every index in range: read in place, each row's start where the rows change.
  if (coo_in_order(idx, nse, static_cast<I>(n_rows), static_cast<I>(n_cols))) {
    ptr.resize(n_rows + 1);
    ptr[0] = 0;
    int64_t r = 0;  // ptr[0, r] written: the rows up to the last entry's
    for (int64_t k = 0; k < nse; ++k)
      for (const int64_t row = static_cast<int64_t>(idx[2 * k]); r < row;) ptr[++r] = k;
    while (r < n_rows) ptr[++r] = nse;
    rows.col_data = idx + 1;
    rows.stride = 2;
    rows.identity = true;
    return rows;
  }
  ptr.assign(n_rows + 1, 0);
  auto valid = [&](int64_t k) {
    int64_t r = static_cast<int64_t>(idx[2 * k]), c = static_cast<int64_t>(idx[2 * k + 1]);
    return r >= 0 && r < n_rows && c >= 0 && c < n_cols;
  };
  int64_t n_valid = 0;
  for (int64_t k = 0; k < nse; ++k) {
    if (valid(k)) {
      ++ptr[idx[2 * k] + 1];
      ++n_valid;
    }
  }
  for (int64_t r = 0; r < n_rows; ++r) ptr[r + 1] += ptr[r];
  rows.cols.resize(n_valid);
  rows.entries.resize(n_valid);
  std::vector<int64_t> next(ptr.begin(), ptr.end() - 1);
  for (int64_t k = 0; k < nse; ++k) {
    if (!valid(k)) continue;
    int64_t at = next[idx[2 * k]]++;
    rows.cols[at] = idx[2 * k + 1];
    rows.entries[at] = k;
  }
  rows.col_data = rows.cols.data();
  return rows;
}

// How a phase's rows [0, end) are shared out: `workers` threads (the caller's and the pool's, one
// for a small product) each take the next of the ranges [bounds[c], bounds[c + 1]) until none is
// left, so a range that turns out slow holds back one thread, not the others.
struct Split {
  std::vector<int64_t> bounds;
  int64_t workers;
};

// Ranges a worker (a slow one is a small part of the whole).
constexpr int64_t kChunksPerWorker = 8;

// The ranges of rows [0, end) for `pool`, of about equal weight, each starting at a multiple of
// `unit` rows: `weight(r)` is a non-decreasing measure of the rows before r, read at O(log end)
// rows (no pass over the rows). The workers: the product's multiply-adds, estimated as lhs
// entries times the rhs's entries a row, over kWorkPerBlock, at least one and at most the pool's
// threads.
template <typename I, typename W>
Split split_rows(const Rows<I>& lhs, const Rows<I>& rhs, int64_t end, int64_t unit, ffi::ThreadPool& pool,
                 W weight) {
  const int64_t rhs_rows = static_cast<int64_t>(rhs.ptr.size()) - 1;
  const double per_row = rhs_rows > 0 ? static_cast<double>(rhs.ptr.back() - rhs.ptr.front()) / rhs_rows : 0.0;
  const double work = static_cast<double>(lhs.ptr[end] - lhs.ptr[0]) * per_row + static_cast<double>(end);
  const int64_t threads = std::max<int64_t>(1, pool.num_threads());
  const int64_t workers = work < static_cast<double>(kWorkPerBlock * threads)
                              ? std::max<int64_t>(1, static_cast<int64_t>(work / kWorkPerBlock))
                              : threads;
  Split split{{0}, workers};
  const int64_t units = (end + unit - 1) / unit;
  const int64_t chunks = workers == 1 ? 1 : std::min(workers * kChunksPerWorker, std::max<int64_t>(units, 1));
  auto at = [&](int64_t u) { return std::min(u * unit, end); };
  const int64_t base = weight(0), total = weight(end) - base;
  for (int64_t c = 1; c < chunks; ++c) {
    const int64_t target = base + static_cast<int64_t>(static_cast<double>(total) * c / chunks);
    int64_t lo = split.bounds.back() / unit, hi = units;  // the first unit in [lo, units] whose weight reaches target
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (weight(at(mid)) < target) lo = mid + 1;
      else hi = mid;
    }
    split.bounds.push_back(at(lo));
  }
  split.bounds.push_back(end);
  return split;
}

// What the row ranges of a phase came to: every one done, one whose structure disagrees with the
// given counts, or one that could not allocate its scratch.
enum class Status { kOk, kMismatch, kNoMemory };

// Runs body(take) once per worker of `split` over `pool`: the body calls take(first, last) for its
// next range of rows (false when none is left) and returns false on a mismatch; an allocation
// that fails in a body ends it (a pool thread must not throw).
template <typename F>
Status parallel_rows(ffi::ThreadPool& pool, const Split& split, F body) {
  const int64_t n = static_cast<int64_t>(split.bounds.size()) - 1;
  std::atomic<int64_t> next{0};
  auto take = [&](int64_t& first, int64_t& last) {
    const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
    if (c >= n) return false;
    first = split.bounds[c];
    last = split.bounds[c + 1];
    return true;
  };
  std::vector<Status> status(split.workers, Status::kOk);
  auto worker = [&](int64_t w) {
    try {
      status[w] = body(take) ? Status::kOk : Status::kMismatch;
    } catch (const std::bad_alloc&) {
      status[w] = Status::kNoMemory;
    }
  };
  hlopt::parallel_for(pool, split.workers, worker);
  return *std::max_element(status.begin(), status.end());
}

ffi::Error no_memory(const std::string& target) {
  return ffi::Error(ffi::ErrorCode::kResourceExhausted, target + ": out of memory for the kernel's scratch");
}

// f() (an ffi::Error), or the out-of-memory error if an allocation on the calling thread fails or
// asks for more than a vector holds (row pointers for an attribute's rows past 2^60).
template <typename F>
ffi::Error guarded(const char* target, F f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return no_memory(target);
  } catch (const std::length_error&) {
    return no_memory(target);
  }
}

struct Dims {
  int64_t rows, inner, cols;
};

// Whether row numbers fit the int32 marker.
bool narrow_rows(const Dims& dims) { return dims.rows < std::numeric_limits<int32_t>::max(); }

bool is_index(ffi::DataType t) { return t == ffi::DataType::S32 || t == ffi::DataType::S64; }

bool one_d(const ffi::AnyBuffer& b, int64_t n) { return b.dimensions().size() == 1 && b.dimensions()[0] == n; }

ffi::Error check_indices(const ffi::AnyBuffer& idx, const char* name) {
  auto d = idx.dimensions();
  if (d.size() != 2 || d[1] != 2)
    return ffi::Error::InvalidArgument(std::string("hlopt_spgemm: ") + name + " indices must be [nse, 2]");
  return ffi::Error::Success();
}

ffi::Error check_dims(const Dims& dims, ffi::DataType index_type) {
  int64_t limit = index_type == ffi::DataType::S32 ? std::numeric_limits<int32_t>::max()
                                                   : std::numeric_limits<int64_t>::max();
  if (dims.rows < 0 || dims.inner < 0 || dims.cols < 0 || dims.rows >= limit || dims.inner >= limit ||
      dims.cols >= limit)
    return ffi::Error::InvalidArgument("hlopt_spgemm: rows, inner and cols must be in [0, the index type's max)");
  if (dims.cols > kMaxCols) return ffi::Error::InvalidArgument("hlopt_spgemm: cols must be at most 2^24");
  return ffi::Error::Success();
}

// Lanes of a rank block: 32 bytes of columns (one AVX2 register).
template <typename I>
constexpr int64_t kLanes = 32 / sizeof(I);

// ranks[i0, i0 + B * kLanes): the number of `cols[0, n)` below each of those columns, B vectors of
// kLanes columns compared at once against every column (a broadcast and B compares a column), so no
// rank needs a horizontal sum.
template <int B, typename I>
__attribute__((always_inline)) inline void rank_blocks(const I* __restrict cols, int64_t n, int64_t i0,
                                                       I* __restrict ranks) {
  typedef I Vec __attribute__((vector_size(32)));  // a compare gives -1 (true) or 0 a lane
  constexpr int64_t L = kLanes<I>;
  Vec block[B], acc[B];
  for (int b = 0; b < B; ++b) {
    __builtin_memcpy(&block[b], cols + i0 + b * L, sizeof(Vec));
    acc[b] = Vec{};
  }
  for (int64_t k = 0; k < n; ++k) {
    const I c = cols[k];
    for (int b = 0; b < B; ++b) acc[b] -= c < block[b];
  }
  for (int b = 0; b < B; ++b) __builtin_memcpy(ranks + i0 + b * L, &acc[b], sizeof(Vec));
}

// ranks[i]: the number of `cols` below cols[i] (distinct columns), compared branch-free. cols and
// ranks have room for n rounded up to kLanes; the lanes past n get a rank that is not read.
template <typename I>
__attribute__((always_inline)) inline void column_ranks_impl(I* __restrict cols, int64_t n, I* __restrict ranks) {
  constexpr int64_t L = kLanes<I>;
  const int64_t blocks = (n + L - 1) / L;
  for (int64_t i = n; i < blocks * L; ++i) cols[i] = std::numeric_limits<I>::max();
  int64_t b = 0;
  for (; b + 4 <= blocks; b += 4) rank_blocks<4>(cols, n, b * L, ranks);
  switch (blocks - b) {
    case 3:
      rank_blocks<3>(cols, n, b * L, ranks);
      break;
    case 2:
      rank_blocks<2>(cols, n, b * L, ranks);
      break;
    case 1:
      rank_blocks<1>(cols, n, b * L, ranks);
      break;
    default:
      break;
  }
}

__attribute__((target_clones("avx2", "default"))) void column_ranks(int32_t* cols, int64_t n, int32_t* ranks) {
  column_ranks_impl(cols, n, ranks);
}

__attribute__((target_clones("avx2", "default"))) void column_ranks(int64_t* cols, int64_t n, int64_t* ranks) {
  column_ranks_impl(cols, n, ranks);
}

// How a row of n distinct columns out of `cols` is put in order: by rank (about n^2 / lanes
// compares), by a bitmap over the columns (n bits set, cols / 64 words read) or by sorting.
enum class Order { kRank, kBitmap, kSort };

template <typename I>
Order row_order(int64_t n, int64_t cols) {
  const int64_t bitmap = 2 * n + cols / 64;
  if (n <= kRankSortMax && n * ((n + kLanes<I> - 1) / kLanes<I>) <= bitmap) return Order::kRank;
  int64_t log2n = 1;
  while ((int64_t{1} << log2n) < n) ++log2n;
  return bitmap <= 2 * n * log2n ? Order::kBitmap : Order::kSort;
}

// Lhs entries ahead at which the rhs rows they name are fetched: their row pointers first, then
// (half the distance ahead, the pointers in cache by then) their columns and values. A product
// reads one rhs row an lhs entry, at random: without this each is a wait on memory.
constexpr int64_t kPrefetchAhead = 16;

template <typename I, typename T>
struct RhsPrefetch {
  const I* lc;  // lhs columns, col(a) = lc[a * ls]
  int64_t ls;
  const int64_t* rp;
  const I* rc;  // rhs columns, col(b) = rc[b * rs]
  int64_t rs;
  const T* rx;  // rhs values (null: none read)
  int64_t end;  // lhs entries

  __attribute__((always_inline)) void operator()(int64_t a) const {
    if (a + kPrefetchAhead < end) __builtin_prefetch(rp + lc[(a + kPrefetchAhead) * ls]);
    if (a + kPrefetchAhead / 2 < end) {
      const int64_t b = rp[lc[(a + kPrefetchAhead / 2) * ls]];
      __builtin_prefetch(rc + b * rs);
      if (rx != nullptr) __builtin_prefetch(rx + b);
    }
  }
};

// The symbolic phase: each row's number of distinct columns, written by `emit(row, count)`; the
// rows of a run of `unit` (from a multiple of it) are all emitted by one thread, in order.
template <typename M, typename I, typename E>
Status count_rows(const Rows<I>& lhs, const Rows<I>& rhs, const Dims& dims, int64_t unit, ffi::ThreadPool& pool,
                  E emit) {
  const int64_t* lp = lhs.ptr.data();
  auto weight = [lp](int64_t r) { return lp[r] - lp[0] + r; };  // entries and rows before r
  return parallel_rows(pool, split_rows(lhs, rhs, dims.rows, unit, pool, weight), [&](auto& take) {
    int64_t first, last;
    if (!take(first, last)) return true;
    std::vector<M> mark(dims.cols, M(-1));
    const int64_t* rp = rhs.ptr.data();
    const I *lc = lhs.col_data, *rc = rhs.col_data;
    const int64_t ls = lhs.stride, rs = rhs.stride;
    const RhsPrefetch<I, char> ahead{lc, ls, rp, rc, rs, nullptr, lp[dims.rows]};
    do {
      for (int64_t r = first; r < last; ++r) {
        int64_t n = 0;
        for (int64_t a = lp[r], a_end = lp[r + 1]; a < a_end; ++a) {
          ahead(a);
          const int64_t j = lc[a * ls];
          for (int64_t b = rp[j], b_end = rp[j + 1]; b < b_end; ++b) {
            const int64_t c = rc[b * rs];
            if (mark[c] != static_cast<M>(r)) {
              mark[c] = static_cast<M>(r);
              ++n;
            }
          }
        }
        emit(r, n);
      }
    } while (take(first, last));
    return true;
  });
}

// Where the output's runs of rows start: run b is rows [b * rows_per, min((b + 1) * rows_per,
// rows)) (empty past the last row), its entries [offset[b], offset[b + 1]).
struct Runs {
  int64_t rows_per = 1;
  std::vector<int64_t> offset;
};

// The run length of `runs` counts over `rows` rows (ceil(rows / runs); one when there are none),
// or -1 when there are more counts than rows, or none for some rows.
int64_t rows_per_run(int64_t rows, int64_t runs) {
  if (runs == 0) return rows == 0 ? 1 : -1;
  return runs > rows ? -1 : (rows - 1) / runs + 1;  // ceil without rows + runs (which may overflow)
}

// The runs' offsets from `runs` entry counts (`count_of(b)` gives run b's) over dims.rows rows, or
// an error when there are more counts than rows, none for some rows, or a count is negative or
// above the run's rows times cols.
template <typename C>
ffi::Error run_offsets(const Dims& dims, int64_t runs, C count_of, Runs& out) {
  out.rows_per = rows_per_run(dims.rows, runs);
  if (out.rows_per < 0)
    return ffi::Error::InvalidArgument("hlopt_spgemm_fill: counts must be [runs], 0 < runs <= rows (none for no rows)");
  out.offset.assign(runs + 1, 0);
  for (int64_t b = 0; b < runs; ++b) {
    const int64_t c = count_of(b);
    // Run b's rows (none past the last row) and the most entries they hold: products and sums that
    // pass int64 are refused, not wrapped.
    int64_t first = 0, most = 0;
    const int64_t n_rows = __builtin_mul_overflow(b, out.rows_per, &first) || first >= dims.rows
                               ? 0 : std::min(dims.rows - first, out.rows_per);
    if (c < 0 || __builtin_mul_overflow(n_rows, dims.cols, &most) || c > most ||
        __builtin_add_overflow(out.offset[b], c, &out.offset[b + 1]))
      return ffi::Error::InvalidArgument(
          "hlopt_spgemm_fill: an entry count is negative or above cols times its rows");
  }
  return ffi::Error::Success();
}

// The numeric phase: the output's entries before `nse` through `put(position, row, column, value)`,
// each row's columns ascending, the rows of a run one after the other from its offset; kMismatch
// when a run's structure disagrees with its count. A run's writes stay in [offset[b],
// offset[b + 1]) whatever the operands hold.
template <typename M, typename T, typename I, typename P>
Status fill_rows(const Rows<I>& lhs, const T* ld, const Rows<I>& rhs, const T* rd, const Runs& runs, const Dims& dims,
                 int64_t nse, ffi::ThreadPool& pool, P put) {
  const std::vector<int64_t>& offset = runs.offset;
  const int64_t per = runs.rows_per;
  // Runs whose entries start at or after nse contribute nothing.
  const int64_t last_run = std::upper_bound(offset.begin(), offset.end() - 1, nse - 1) - offset.begin();
  const int64_t last_row = std::min(last_run * per, dims.rows);
  // Each operand's data in its rows' order (the buffers themselves when read in place).
  std::vector<T> lv(lhs.entries.size()), rv(rhs.entries.size());
  for (size_t k = 0; k < lv.size(); ++k) lv[k] = ld[lhs.entries[k]];
  for (size_t k = 0; k < rv.size(); ++k) rv[k] = rd[rhs.entries[k]];
  const T* lx = lhs.identity ? ld : lv.data();
  const T* rx = rhs.identity ? rd : rv.data();
  // Entries before row r (the output's up to its run, the lhs's) and rows: what the fill's ranges share evenly.
  auto weight = [&offset, per, lp = lhs.ptr.data()](int64_t r) { return offset[r / per] + lp[r] - lp[0] + r; };
  return parallel_rows(pool, split_rows(lhs, rhs, last_row, per, pool, weight), [&](auto& take) {
    int64_t first, last;
    if (!take(first, last)) return true;
    // One slot per output column: the last row that touched it and its running sum.
    struct Slot {
      M row;
      T sum;
    };
    std::vector<Slot> slots(dims.cols, Slot{M(-1), T(0)});
    // a row's distinct columns (at most cols), with room for column_ranks' padding
    std::unique_ptr<I[]> found(new I[dims.cols + kLanes<I>]);
    std::vector<I> rank_of(kRankSortMax + kLanes<I>);
    std::vector<uint64_t> bits((dims.cols + 63) / 64, 0);
    I* ranks = rank_of.data();
    Slot* slot = slots.data();
    I* cols = found.get();
    uint64_t* bit = bits.data();
    const int64_t *lp = lhs.ptr.data(), *rp = rhs.ptr.data();
    const I *lc = lhs.col_data, *rc = rhs.col_data;
    const int64_t ls = lhs.stride, rs = rhs.stride;
    const RhsPrefetch<I, T> ahead{lc, ls, rp, rc, rs, rx, lp[dims.rows]};
    do {
      int64_t start = offset[first / per];  // where row r's entries start
      for (int64_t r = first; r < last; ++r) {
        if (r % per == 0 && start != offset[r / per]) return false;  // the run before has other counts
        const M row = static_cast<M>(r);
        int64_t n = 0;
        for (int64_t a = lp[r], a_end = lp[r + 1]; a < a_end; ++a) {
          ahead(a);
          const int64_t j = lc[a * ls];
          const T x = lx[a];
          for (int64_t b = rp[j], b_end = rp[j + 1]; b < b_end; ++b) {
            const I c = rc[b * rs];
            Slot& s = slot[c];
            if (s.row != row) {
              s.row = row;
              s.sum = x * rx[b];
              cols[n++] = c;
            } else {
              s.sum += x * rx[b];
            }
          }
        }
        const int64_t end = std::min(offset[r / per + 1], nse);
        if (start + n > offset[r / per + 1]) return false;  // more entries than the run's count
        const int64_t room = std::max<int64_t>(0, end - start);
        switch (row_order<I>(n, dims.cols)) {
          case Order::kRank:
            column_ranks(cols, n, ranks);
            if (n <= room) {
              for (int64_t i = 0; i < n; ++i) put(start + ranks[i], r, cols[i], slot[cols[i]].sum);
            } else {
              for (int64_t i = 0; i < n; ++i)
                if (ranks[i] < room) put(start + ranks[i], r, cols[i], slot[cols[i]].sum);
            }
            break;
          case Order::kBitmap: {
            for (int64_t i = 0; i < n; ++i) bit[cols[i] >> 6] |= uint64_t{1} << (cols[i] & 63);
            const int64_t words = static_cast<int64_t>(bits.size());
            if (n <= room) {  // the whole row: no check an entry
              int64_t at = start;
              for (int64_t w = 0; w < words; ++w) {
                for (uint64_t word = bit[w]; word != 0; word &= word - 1) {
                  const I c = static_cast<I>(w * 64 + __builtin_ctzll(word));
                  put(at++, r, c, slot[c].sum);
                }
                bit[w] = 0;
              }
              break;
            }
            int64_t at = 0;
            for (int64_t w = 0; w < words; ++w) {
              for (uint64_t word = bit[w]; word != 0; word &= word - 1) {
                const I c = static_cast<I>(w * 64 + __builtin_ctzll(word));
                if (at < room) put(start + at, r, c, slot[c].sum);
                ++at;
              }
              bit[w] = 0;
            }
            break;
          }
          case Order::kSort:
            std::sort(cols, cols + n);
            for (int64_t i = 0; i < std::min(n, room); ++i) put(start + i, r, cols[i], slot[cols[i]].sum);
            break;
        }
        start += n;
      }
      if (last > first && start != offset[(last - 1) / per + 1]) return false;  // fewer entries than its count
    } while (take(first, last));
    return true;
  });
}

ffi::Error status_error(Status status, const char* target) {
  if (status == Status::kNoMemory) return no_memory(target);
  if (status == Status::kMismatch)
    return ffi::Error::InvalidArgument(std::string(target) +
                                       ": the output's row counts do not match the operands' structure");
  return ffi::Error::Success();
}

// Calls `f(T{})` for the data type `dtype` (float32, float64, complex64, complex128).
template <typename F>
ffi::Error by_dtype(ffi::DataType dtype, const char* target, F f) {
  switch (dtype) {
    case ffi::DataType::F32:
      return f(float{});
    case ffi::DataType::F64:
      return f(double{});
    case ffi::DataType::C64:
      return f(std::complex<float>{});
    case ffi::DataType::C128:
      return f(std::complex<double>{});
    default:
      return ffi::Error::InvalidArgument(std::string(target) +
                                         ": data must be float32, float64, complex64 or complex128");
  }
}

// Calls `f(marker, index)` with the index type `type` and the narrowest marker for dims.rows.
template <typename F>
ffi::Error by_index(ffi::DataType type, const Dims& dims, F f) {
  if (type == ffi::DataType::S32) return f(int32_t{}, int32_t{});
  return narrow_rows(dims) ? f(int32_t{}, int64_t{}) : f(int64_t{}, int64_t{});
}

// fill_rows, then padding (column cols, value 0; a COO entry's row `rows`) after the last entry.
template <typename M, typename T, typename I, typename P>
ffi::Error fill_and_pad(const Rows<I>& lhs, const T* ld, const Rows<I>& rhs, const T* rd,
                        const Runs& runs, const Dims& dims, int64_t nse, ffi::ThreadPool& pool, P put,
                        const char* target) {
  if (auto err = status_error(fill_rows<M>(lhs, ld, rhs, rd, runs, dims, nse, pool, put), target); err.failure())
    return err;
  for (int64_t k = std::min(runs.offset.back(), nse); k < nse; ++k) put(k, dims.rows, static_cast<I>(dims.cols), T(0));
  return ffi::Error::Success();
}

// ---- BCOO operands ----

ffi::Error SpgemmCountImpl(ffi::ThreadPool pool, ffi::AnyBuffer li, ffi::AnyBuffer ri, int64_t rows, int64_t inner,
                           int64_t cols, ffi::Result<ffi::AnyBuffer> counts) {
  Dims dims{rows, inner, cols};
  auto type = li.element_type();
  if (!is_index(type)) return ffi::Error::InvalidArgument("hlopt_spgemm_count: indices must be int32 or int64");
  if (ri.element_type() != type || counts->element_type() != type)
    return ffi::Error::InvalidArgument("hlopt_spgemm_count: indices and counts must have one dtype");
  for (auto err : {check_indices(li, "lhs"), check_indices(ri, "rhs"), check_dims(dims, type)})
    if (err.failure()) return err;
  const int64_t runs = counts->dimensions().size() == 1 ? counts->dimensions()[0] : -1;
  const int64_t per = runs < 0 ? -1 : rows_per_run(rows, runs);
  if (per < 0)
    return ffi::Error::InvalidArgument("hlopt_spgemm_count: counts must be [runs], 0 < runs <= rows (none for no rows)");
  int64_t lnse = li.dimensions()[0], rnse = ri.dimensions()[0];
  auto run = [&](auto marker, auto index) -> ffi::Error {
    using M = decltype(marker);
    using I = decltype(index);
    Rows<I> lhs = group_rows(li.typed_data<I>(), lnse, dims.rows, dims.inner);
    Rows<I> rhs = group_rows(ri.typed_data<I>(), rnse, dims.inner, dims.cols);
    // Each run's entries, summed by the one thread that counts its rows.
    std::vector<int64_t> total(runs, 0);
    auto emit = [&total, per](int64_t r, int64_t n) { total[r / per] += n; };
    if (auto err = status_error(count_rows<M>(lhs, rhs, dims, per, pool, emit), "hlopt_spgemm_count"); err.failure())
      return err;
    I* out = counts->typed_data<I>();
    for (int64_t b = 0; b < runs; ++b) {
      if (total[b] > std::numeric_limits<I>::max())
        return ffi::Error::InvalidArgument("hlopt_spgemm_count: a run of rows has more entries than its index type holds");
      out[b] = static_cast<I>(total[b]);
    }
    return ffi::Error::Success();
  };
  return guarded("hlopt_spgemm_count", [&] { return by_index(type, dims, run); });
}

template <typename T, typename M, typename I>
ffi::Error coo_fill(const ffi::AnyBuffer& ld, const ffi::AnyBuffer& li, const ffi::AnyBuffer& rd,
                    const ffi::AnyBuffer& ri, const ffi::AnyBuffer& counts, const Dims& dims, ffi::AnyBuffer& out_data,
                    ffi::AnyBuffer& out_idx, ffi::ThreadPool& pool) {
  const int64_t nse = out_data.dimensions()[0];
  const I* count = counts.typed_data<I>();
  Runs runs;
  if (auto err = run_offsets(dims, counts.dimensions()[0], [count](int64_t b) { return static_cast<int64_t>(count[b]); },
                             runs);
      err.failure())
    return err;
  Rows<I> lhs = group_rows(li.typed_data<I>(), li.dimensions()[0], dims.rows, dims.inner);
  Rows<I> rhs = group_rows(ri.typed_data<I>(), ri.dimensions()[0], dims.inner, dims.cols);
  T* data = out_data.typed_data<T>();
  I* idx = out_idx.typed_data<I>();
  auto put = [data, idx](int64_t at, int64_t r, I c, T v) {
    data[at] = v;
    idx[2 * at] = static_cast<I>(r);
    idx[2 * at + 1] = c;
  };
  return fill_and_pad<M>(lhs, ld.typed_data<T>(), rhs, rd.typed_data<T>(), runs, dims, nse, pool, put,
                         "hlopt_spgemm_fill");
}

ffi::Error SpgemmFillImpl(ffi::ThreadPool pool, ffi::AnyBuffer ld, ffi::AnyBuffer li, ffi::AnyBuffer rd, ffi::AnyBuffer ri,
                          ffi::AnyBuffer counts, int64_t rows, int64_t inner, int64_t cols,
                          ffi::Result<ffi::AnyBuffer> out_data, ffi::Result<ffi::AnyBuffer> out_idx) {
  Dims dims{rows, inner, cols};
  auto type = li.element_type();
  auto dtype = ld.element_type();
  if (!is_index(type)) return ffi::Error::InvalidArgument("hlopt_spgemm_fill: indices must be int32 or int64");
  if (ri.element_type() != type || counts.element_type() != type || out_idx->element_type() != type)
    return ffi::Error::InvalidArgument("hlopt_spgemm_fill: indices, counts and output indices must have one dtype");
  if (rd.element_type() != dtype || out_data->element_type() != dtype)
    return ffi::Error::InvalidArgument("hlopt_spgemm_fill: operand and output data must have one dtype");
  for (auto err : {check_indices(li, "lhs"), check_indices(ri, "rhs"), check_indices(*out_idx, "output"),
                   check_dims(dims, type)})
    if (err.failure()) return err;
  if (!one_d(ld, li.dimensions()[0]) || !one_d(rd, ri.dimensions()[0]) ||
      !one_d(*out_data, out_idx->dimensions()[0]) || counts.dimensions().size() != 1)
    return ffi::Error::InvalidArgument(
        "hlopt_spgemm_fill: data must be [nse] beside indices [nse, 2], and counts [runs]");
  return guarded("hlopt_spgemm_fill", [&] { return by_dtype(dtype, "hlopt_spgemm_fill", [&](auto t) {
    return by_index(type, dims, [&](auto m, auto i) {
      return coo_fill<decltype(t), decltype(m), decltype(i)>(ld, li, rd, ri, counts, dims, *out_data, *out_idx, pool);
    });
  }); });
}

// The attributes every SpGEMM kernel reads, added to `binding`.
template <typename B>
auto with_dims(B&& binding) {
  return std::move(binding).template Attr<int64_t>("rows").template Attr<int64_t>("inner").template Attr<int64_t>(
      "cols");
}

using Buf = ffi::AnyBuffer;

}  // namespace

XLA_FFI_DEFINE_HANDLER(HloptSpgemmCount, SpgemmCountImpl,
                       with_dims(hlopt::bind_pooled<Buf, Buf>()).Ret<Buf>());
XLA_FFI_DEFINE_HANDLER(HloptSpgemmFill, SpgemmFillImpl,
                       with_dims(hlopt::bind_pooled<Buf, Buf, Buf, Buf, Buf>()).Ret<Buf>().Ret<Buf>());

HLOPT_REGISTER_HANDLER("hlopt_spgemm_count", HloptSpgemmCount);
HLOPT_REGISTER_HANDLER("hlopt_spgemm_fill", HloptSpgemmFill);
