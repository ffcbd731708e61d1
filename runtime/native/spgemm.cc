// Sparse x sparse matrix product (SpGEMM) of two COO matrices, CSR-style in two phases.
//
// Operands are BCOO buffers of 2-d matrices without batch or dense dims: `indices[nse, 2]`
// (row, column) and `data[nse]`, lhs `rows x inner`, rhs `inner x cols`. Entries whose index is
// out of range (padding, or anything else) are dropped, as JAX's BCOO treats them; duplicates
// add. Nothing from an operand is trusted: every index, count and size is checked before use.
//
// - hlopt_spgemm_count (symbolic phase): `counts[rows]`, the distinct output columns of each row.
// - hlopt_spgemm_fill (numeric phase): given `counts` (checked against the operands' structure),
//   the output's first `nse` entries in row-major order (`nse` is the result's size; padding
//   after the last entry has index (rows, cols) and value 0), the values summed in the data's
//   type.
//
// Each phase takes one output row at a time with a dense marker over the output's columns (one
// per thread); rows are split across threads into ranges of equal work (multiply-adds).

#include <algorithm>
#include <complex>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "parallel.h"
#include "registry.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// Work (multiply-adds) below which a range of rows is not split further.
constexpr int64_t kWorkPerBlock = 1 << 18;
// Rows with at most this many entries are ordered by rank (quadratic, branch-free) rather than sorted.
constexpr int64_t kRankSortMax = 256;

// One operand's rows as CSR: the in-range entries of row r are `k in [ptr[r], ptr[r+1])`, with
// column `col(k)` and position `entries[k]` in the operand's buffers (for its data). Entries whose
// row or column is out of range are dropped. Buffers already in row order with every index in
// range are read in place (`identity`: entry k is k); others are grouped into `cols` and `entries`.
template <typename I>
struct Rows {
  std::vector<int64_t> ptr;
  const I* col_data = nullptr;  // col(k) = col_data[k * stride]
  int64_t stride = 1;
  bool identity = false;
  std::vector<I> cols;
  std::vector<int64_t> entries;

  I col(int64_t k) const { return col_data[k * stride]; }
};

// Groups an operand's entries by row (a stable counting sort, or none when they are in row order).
template <typename I>
Rows<I> group_rows(const I* idx, int64_t nse, int64_t n_rows, int64_t n_cols) {
  Rows<I> rows;
  std::vector<int64_t>& ptr = rows.ptr;
  ptr.assign(n_rows + 1, 0);
  auto valid = [&](int64_t k) {
    int64_t r = static_cast<int64_t>(idx[2 * k]), c = static_cast<int64_t>(idx[2 * k + 1]);
    return r >= 0 && r < n_rows && c >= 0 && c < n_cols;
  };
  bool sorted = true;
  int64_t n_valid = 0;
  for (int64_t k = 0; k < nse; ++k) {
    if (k > 0 && idx[2 * k] < idx[2 * k - 2]) sorted = false;
    if (valid(k)) {
      ++ptr[idx[2 * k] + 1];
      ++n_valid;
    }
  }
  for (int64_t r = 0; r < n_rows; ++r) ptr[r + 1] += ptr[r];
  if (sorted && n_valid == nse) {
    rows.col_data = idx + 1;
    rows.stride = 2;
    rows.identity = true;
    return rows;
  }
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

// Row ranges [bounds[b], bounds[b+1]) of about equal work (multiply-adds), one per thread of
// `pool` and the caller, fewer for a small product.
template <typename I>
std::vector<int64_t> split_rows(const Rows<I>& lhs, const Rows<I>& rhs, int64_t end, ffi::ThreadPool& pool) {
  std::vector<int64_t> work(end + 1, 0);
  for (int64_t r = 0; r < end; ++r) {
    int64_t w = 1;
    for (int64_t a = lhs.ptr[r]; a < lhs.ptr[r + 1]; ++a) w += rhs.ptr[lhs.col(a) + 1] - rhs.ptr[lhs.col(a)];
    work[r + 1] = work[r] + w;
  }
  const int64_t total = work.back();
  const int64_t blocks = std::clamp<int64_t>(total / kWorkPerBlock, 1, pool.num_threads() + 1);
  std::vector<int64_t> bounds{0};
  for (int64_t t = 1; t < blocks; ++t) {
    auto at = std::lower_bound(work.begin(), work.end(), total * t / blocks);
    bounds.push_back(std::max(bounds.back(), static_cast<int64_t>(at - work.begin())));
  }
  bounds.push_back(end);
  return bounds;
}

// Runs body(first_row, last_row) on each range of `bounds` over `pool`; true when every call
// returned true.
template <typename F>
bool parallel_rows(ffi::ThreadPool& pool, const std::vector<int64_t>& bounds, F body) {
  const int64_t n = static_cast<int64_t>(bounds.size()) - 1;
  std::vector<char> ok(n, 0);
  auto block = [&](int64_t b) { ok[b] = body(bounds[b], bounds[b + 1]); };
  hlopt::parallel_for(pool, n, block);
  return std::all_of(ok.begin(), ok.end(), [](char c) { return c != 0; });
}

struct Dims {
  int64_t rows, inner, cols;
};

// Whether row numbers fit the int32 marker.
bool narrow_rows(const Dims& dims) { return dims.rows < std::numeric_limits<int32_t>::max(); }

ffi::Error check_indices(const ffi::AnyBuffer& idx, const char* name) {
  auto d = idx.dimensions();
  if (d.size() != 2 || d[1] != 2)
    return ffi::Error::InvalidArgument(std::string("hlopt_spgemm: ") + name + " indices must be [nse, 2]");
  return ffi::Error::Success();
}

ffi::Error check_dims(const Dims& dims, ffi::DataType index_type) {
  int64_t limit = index_type == ffi::DataType::S32 ? std::numeric_limits<int32_t>::max()
                                                   : std::numeric_limits<int64_t>::max();
  if (dims.rows < 0 || dims.inner < 0 || dims.cols < 0 || dims.rows >= limit || dims.cols >= limit)
    return ffi::Error::InvalidArgument("hlopt_spgemm: rows, inner and cols must be in [0, the index type's max)");
  return ffi::Error::Success();
}

// ranks[i]: the number of `cols` below cols[i] (distinct columns), compared branch-free.
__attribute__((target_clones("avx2", "default"))) void column_ranks(const int32_t* cols, int64_t n, int32_t* ranks) {
  for (int64_t i = 0; i < n; ++i) {
    int32_t rank = 0;
    for (int64_t k = 0; k < n; ++k) rank += cols[k] < cols[i];
    ranks[i] = rank;
  }
}

__attribute__((target_clones("avx2", "default"))) void column_ranks(const int64_t* cols, int64_t n, int64_t* ranks) {
  for (int64_t i = 0; i < n; ++i) {
    int64_t rank = 0;
    for (int64_t k = 0; k < n; ++k) rank += cols[k] < cols[i];
    ranks[i] = rank;
  }
}

// M: the marker type, wide enough for a row number (int32 halves the markers' cache footprint).
template <typename M, typename I>
void count_impl(const I* li, int64_t lnse, const I* ri, int64_t rnse, const Dims& dims, I* counts,
                ffi::ThreadPool& pool) {
  Rows<I> lhs = group_rows(li, lnse, dims.rows, dims.inner);
  Rows<I> rhs = group_rows(ri, rnse, dims.inner, dims.cols);
  parallel_rows(pool, split_rows(lhs, rhs, dims.rows, pool), [&](int64_t first, int64_t last) {
    std::vector<M> mark(dims.cols, M(-1));
    for (int64_t r = first; r < last; ++r) {
      int64_t n = 0;
      for (int64_t a = lhs.ptr[r]; a < lhs.ptr[r + 1]; ++a) {
        int64_t j = lhs.col(a);
        for (int64_t b = rhs.ptr[j]; b < rhs.ptr[j + 1]; ++b) {
          int64_t c = rhs.col(b);
          if (mark[c] != static_cast<M>(r)) {
            mark[c] = static_cast<M>(r);
            ++n;
          }
        }
      }
      counts[r] = static_cast<I>(n);
    }
    return true;
  });
}

ffi::Error SpgemmCountImpl(ffi::ThreadPool pool, ffi::AnyBuffer li, ffi::AnyBuffer ri, int64_t rows, int64_t inner,
                           int64_t cols, ffi::Result<ffi::AnyBuffer> counts) {
  Dims dims{rows, inner, cols};
  auto type = li.element_type();
  if (type != ffi::DataType::S32 && type != ffi::DataType::S64)
    return ffi::Error::InvalidArgument("hlopt_spgemm_count: indices must be int32 or int64");
  if (ri.element_type() != type || counts->element_type() != type)
    return ffi::Error::InvalidArgument("hlopt_spgemm_count: indices and counts must have one dtype");
  for (auto err : {check_indices(li, "lhs"), check_indices(ri, "rhs"), check_dims(dims, type)})
    if (err.failure()) return err;
  if (counts->dimensions().size() != 1 || counts->dimensions()[0] != rows)
    return ffi::Error::InvalidArgument("hlopt_spgemm_count: counts must be [rows]");
  int64_t lnse = li.dimensions()[0], rnse = ri.dimensions()[0];
  if (type == ffi::DataType::S32)
    count_impl<int32_t>(li.typed_data<int32_t>(), lnse, ri.typed_data<int32_t>(), rnse, dims,
                        counts->typed_data<int32_t>(), pool);
  else if (narrow_rows(dims))
    count_impl<int32_t>(li.typed_data<int64_t>(), lnse, ri.typed_data<int64_t>(), rnse, dims,
                        counts->typed_data<int64_t>(), pool);
  else
    count_impl<int64_t>(li.typed_data<int64_t>(), lnse, ri.typed_data<int64_t>(), rnse, dims,
                        counts->typed_data<int64_t>(), pool);
  return ffi::Error::Success();
}

// The numeric phase; false when `counts` disagrees with the operands' structure.
template <typename M, typename T, typename I>
ffi::Error fill_impl(const T* ld, const I* li, int64_t lnse, const T* rd, const I* ri, int64_t rnse, const I* counts,
                     const Dims& dims, int64_t nse, T* out_data, I* out_idx, ffi::ThreadPool& pool) {
  // Offsets of each row's entries in the output, from the checked counts.
  std::vector<int64_t> offset(dims.rows + 1, 0);
  for (int64_t r = 0; r < dims.rows; ++r) {
    int64_t c = static_cast<int64_t>(counts[r]);
    if (c < 0 || c > dims.cols)
      return ffi::Error::InvalidArgument("hlopt_spgemm_fill: a row count is negative or above cols");
    offset[r + 1] = offset[r] + c;
  }
  // Rows whose entries start at or after nse contribute nothing.
  int64_t last_row = std::upper_bound(offset.begin(), offset.end() - 1, nse - 1) - offset.begin();
  last_row = std::min(last_row, dims.rows);
  Rows<I> lhs = group_rows(li, lnse, dims.rows, dims.inner);
  Rows<I> rhs = group_rows(ri, rnse, dims.inner, dims.cols);
  // Each operand's data in its rows' order (the buffers themselves when read in place).
  std::vector<T> lv(lhs.entries.size()), rv(rhs.entries.size());
  for (size_t k = 0; k < lv.size(); ++k) lv[k] = ld[lhs.entries[k]];
  for (size_t k = 0; k < rv.size(); ++k) rv[k] = rd[rhs.entries[k]];
  const T* lx = lhs.identity ? ld : lv.data();
  const T* rx = rhs.identity ? rd : rv.data();
  bool ok = parallel_rows(pool, split_rows(lhs, rhs, last_row, pool), [&](int64_t first, int64_t last) {
    // One slot per output column: the last row that touched it and its running sum.
    struct Slot {
      M row;
      T sum;
    };
    std::vector<Slot> slots(dims.cols, Slot{M(-1), T(0)});
    std::vector<I> found(dims.cols);  // a row's distinct columns (at most cols)
    std::vector<I> rank_of(kRankSortMax);
    I* ranks = rank_of.data();
    Slot* slot = slots.data();
    I* cols = found.data();
    const int64_t *lp = lhs.ptr.data(), *rp = rhs.ptr.data();
    const I *lc = lhs.col_data, *rc = rhs.col_data;
    const int64_t ls = lhs.stride, rs = rhs.stride;
    for (int64_t r = first; r < last; ++r) {
      const M row = static_cast<M>(r);
      int64_t n = 0;
      for (int64_t a = lp[r], a_end = lp[r + 1]; a < a_end; ++a) {
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
      if (n != offset[r + 1] - offset[r]) return false;
      // The row's entries in column order: a short row by each column's rank (branch-free
      // compares), a long one by sorting, a dense one by reading the slots in column order.
      const int64_t start = offset[r], room = std::min(offset[r + 1], nse) - start;
      auto put = [&](int64_t at, I c) {
        out_data[start + at] = slot[c].sum;
        out_idx[2 * (start + at)] = static_cast<I>(r);
        out_idx[2 * (start + at) + 1] = c;
      };
      if (n <= kRankSortMax) {
        column_ranks(cols, n, ranks);
        for (int64_t i = 0; i < n; ++i)
          if (ranks[i] < room) put(ranks[i], cols[i]);
        continue;
      }
      if (n > dims.cols / 64) {
        n = 0;
        for (int64_t c = 0; c < dims.cols; ++c)
          if (slot[c].row == row) cols[n++] = static_cast<I>(c);
      } else {
        std::sort(cols, cols + n);
      }
      for (int64_t i = 0; i < std::min(n, room); ++i) put(i, cols[i]);
    }
    return true;
  });
  if (!ok) return ffi::Error::InvalidArgument("hlopt_spgemm_fill: counts do not match the operands' structure");
  for (int64_t k = std::min(offset[dims.rows], nse); k < nse; ++k) {
    out_data[k] = T(0);
    out_idx[2 * k] = static_cast<I>(dims.rows);
    out_idx[2 * k + 1] = static_cast<I>(dims.cols);
  }
  return ffi::Error::Success();
}

template <typename T>
ffi::Error fill_typed(const ffi::AnyBuffer& ld, const ffi::AnyBuffer& li, const ffi::AnyBuffer& rd,
                      const ffi::AnyBuffer& ri, const ffi::AnyBuffer& counts, const Dims& dims,
                      ffi::AnyBuffer& out_data, ffi::AnyBuffer& out_idx, ffi::ThreadPool& pool) {
  int64_t lnse = li.dimensions()[0], rnse = ri.dimensions()[0], nse = out_data.dimensions()[0];
  if (li.element_type() == ffi::DataType::S32)
    return fill_impl<int32_t>(ld.typed_data<T>(), li.typed_data<int32_t>(), lnse, rd.typed_data<T>(),
                              ri.typed_data<int32_t>(), rnse, counts.typed_data<int32_t>(), dims, nse,
                              out_data.typed_data<T>(), out_idx.typed_data<int32_t>(), pool);
  auto fill = [&](auto marker) {
    return fill_impl<decltype(marker)>(ld.typed_data<T>(), li.typed_data<int64_t>(), lnse, rd.typed_data<T>(),
                                       ri.typed_data<int64_t>(), rnse, counts.typed_data<int64_t>(), dims, nse,
                                       out_data.typed_data<T>(), out_idx.typed_data<int64_t>(), pool);
  };
  return narrow_rows(dims) ? fill(int32_t{}) : fill(int64_t{});
}

ffi::Error SpgemmFillImpl(ffi::ThreadPool pool, ffi::AnyBuffer ld, ffi::AnyBuffer li, ffi::AnyBuffer rd, ffi::AnyBuffer ri,
                          ffi::AnyBuffer counts, int64_t rows, int64_t inner, int64_t cols,
                          ffi::Result<ffi::AnyBuffer> out_data, ffi::Result<ffi::AnyBuffer> out_idx) {
  Dims dims{rows, inner, cols};
  auto type = li.element_type();
  auto dtype = ld.element_type();
  if (type != ffi::DataType::S32 && type != ffi::DataType::S64)
    return ffi::Error::InvalidArgument("hlopt_spgemm_fill: indices must be int32 or int64");
  if (ri.element_type() != type || counts.element_type() != type || out_idx->element_type() != type)
    return ffi::Error::InvalidArgument("hlopt_spgemm_fill: indices, counts and output indices must have one dtype");
  if (rd.element_type() != dtype || out_data->element_type() != dtype)
    return ffi::Error::InvalidArgument("hlopt_spgemm_fill: operand and output data must have one dtype");
  for (auto err : {check_indices(li, "lhs"), check_indices(ri, "rhs"), check_indices(*out_idx, "output"),
                   check_dims(dims, type)})
    if (err.failure()) return err;
  auto one_d = [](const ffi::AnyBuffer& b, int64_t n) { return b.dimensions().size() == 1 && b.dimensions()[0] == n; };
  if (!one_d(ld, li.dimensions()[0]) || !one_d(rd, ri.dimensions()[0]) ||
      !one_d(*out_data, out_idx->dimensions()[0]) || !one_d(counts, rows))
    return ffi::Error::InvalidArgument(
        "hlopt_spgemm_fill: data must be [nse] beside indices [nse, 2], and counts [rows]");
  switch (dtype) {
    case ffi::DataType::F32:
      return fill_typed<float>(ld, li, rd, ri, counts, dims, *out_data, *out_idx, pool);
    case ffi::DataType::F64:
      return fill_typed<double>(ld, li, rd, ri, counts, dims, *out_data, *out_idx, pool);
    case ffi::DataType::C64:
      return fill_typed<std::complex<float>>(ld, li, rd, ri, counts, dims, *out_data, *out_idx, pool);
    case ffi::DataType::C128:
      return fill_typed<std::complex<double>>(ld, li, rd, ri, counts, dims, *out_data, *out_idx, pool);
    default:
      return ffi::Error::InvalidArgument("hlopt_spgemm_fill: data must be float32, float64, complex64 or complex128");
  }
}

}  // namespace

XLA_FFI_DEFINE_HANDLER(HloptSpgemmCount, SpgemmCountImpl,
                       ffi::Ffi::Bind()
                           .Ctx<ffi::ThreadPool>()
                           .Arg<ffi::AnyBuffer>()
                           .Arg<ffi::AnyBuffer>()
                           .Attr<int64_t>("rows")
                           .Attr<int64_t>("inner")
                           .Attr<int64_t>("cols")
                           .Ret<ffi::AnyBuffer>());

XLA_FFI_DEFINE_HANDLER(HloptSpgemmFill, SpgemmFillImpl,
                       ffi::Ffi::Bind()
                           .Ctx<ffi::ThreadPool>()
                           .Arg<ffi::AnyBuffer>()
                           .Arg<ffi::AnyBuffer>()
                           .Arg<ffi::AnyBuffer>()
                           .Arg<ffi::AnyBuffer>()
                           .Arg<ffi::AnyBuffer>()
                           .Attr<int64_t>("rows")
                           .Attr<int64_t>("inner")
                           .Attr<int64_t>("cols")
                           .Ret<ffi::AnyBuffer>()
                           .Ret<ffi::AnyBuffer>());

HLOPT_REGISTER_HANDLER("hlopt_spgemm_count", HloptSpgemmCount);
HLOPT_REGISTER_HANDLER("hlopt_spgemm_fill", HloptSpgemmFill);
