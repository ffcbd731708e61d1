// What a CSR SpMV with random columns can reach on this machine, in plain C++ (bench/spmv_bound.py
// builds and runs it): the same matrix as bench/sparse_scipy.py's (float32, `per` random columns a
// row, sorted in each row), its pieces timed alone on all cores, each as a share of a plain copy's
// bandwidth, counting the SpMV's bytes as sparse_scipy.py counts them.
//
//   spmv_bound ROWS PER THREADS  ->  one line per measurement: name seconds
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace {

int64_t rows, threads;
std::vector<float> data, x, y;
std::vector<int32_t> col, ptr;
float sink[64];

double seconds(void (*f)(int64_t, int64_t), int reps = 15) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int64_t j = 1; j < threads; ++j) pool.emplace_back(f, rows * j / threads, rows * (j + 1) / threads);
    f(0, rows / threads);
    for (auto& th : pool) th.join();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[reps / 2];
}

// The matrix's two arrays of the rows [r0, r1), read and summed (no gather, nothing written).
void stream(int64_t r0, int64_t r1) {
  int32_t s = 0;
  for (int64_t e = ptr[r0]; e < ptr[r1]; ++e) s += col[e] ^ reinterpret_cast<const int32_t*>(data.data())[e];
  sink[r0 % 64] = s;
}

// x[col[e]] summed over the entries of [r0, r1) (no matrix values, nothing written), x prefetched
// A entries ahead into L1 and B ahead into L2 (0: none).
template <int A, int B>
void gather(int64_t r0, int64_t r1) {
  const int32_t* c = col.data();
  const float* v = x.data();
  const int64_t e0 = ptr[r0], e1 = ptr[r1], last = e1 - std::max(A, B) - 4;
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t e = e0;
  for (; e + 4 <= e1; e += 4) {
    if (e < last) {
      for (int j = 0; j < 4; ++j) {
        if (A) __builtin_prefetch(v + c[e + A + j], 0, 3);
        if (B) __builtin_prefetch(v + c[e + B + j], 0, 1);
      }
    }
    s0 += v[c[e]];
    s1 += v[c[e + 1]];
    s2 += v[c[e + 2]];
    s3 += v[c[e + 3]];
  }
  for (; e < e1; ++e) s0 += v[c[e]];
  sink[r0 % 64] = s0 + s1 + s2 + s3;
}

// y = A x over the rows [r0, r1); with `ahead`, the entries' arrays prefetched 256 entries ahead
// and x 64 ahead, into L1 (runtime/native/csr.cc's SpMV for an x past L2).
template <bool ahead>
void spmv(int64_t r0, int64_t r1) {
  const float* d = data.data();
  const int32_t* c = col.data();
  const float* v = x.data();
  const int64_t nse = ptr[rows];
  int64_t next = ptr[r0];
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t p0 = ptr[r], p1 = ptr[r + 1];
    if (ahead)
      for (const int64_t end = std::min<int64_t>(p0 + 256, nse); next < end; next += 16) {
        __builtin_prefetch(d + next, 0, 3);
        __builtin_prefetch(c + next, 0, 3);
      }
    float s = 0;
    for (int64_t e = p0; e < p1; ++e) {
      if (ahead && e + 64 < nse) __builtin_prefetch(v + c[e + 64], 0, 3);
      s += d[e] * v[c[e]];
    }
    y[r] = s;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: spmv_bound ROWS PER THREADS\n");
    return 2;
  }
  rows = std::atoll(argv[1]);
  const int64_t per = std::atoll(argv[2]);
  threads = std::atoll(argv[3]);
  if (rows < 1 || per < 1 || threads < 1 || rows * per > (int64_t{1} << 31) - 1) {
    std::fprintf(stderr, "spmv_bound: ROWS, PER and THREADS must be positive, ROWS * PER below 2^31\n");
    return 2;
  }
  std::mt19937_64 g(0);
  data.resize(rows * per);
  col.resize(rows * per);
  ptr.resize(rows + 1);
  x.resize(rows);
  y.resize(rows);
  for (auto& v : x) v = static_cast<float>(g() % 1000) / 1000.f;
  for (int64_t r = 0; r <= rows; ++r) ptr[r] = static_cast<int32_t>(r * per);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < per; ++j) {
      col[r * per + j] = static_cast<int32_t>(g() % rows);
      data[r * per + j] = static_cast<float>(g() % 1000) / 1000.f;
    }
    std::sort(col.begin() + r * per, col.begin() + (r + 1) * per);
  }
  // A copy of 256 MiB, as sparse_scipy.py's (np.copyto); its bandwidth counts what is read and written.
  std::vector<char> src(256 << 20, 1), dst(256 << 20, 0);
  std::vector<double> t;
  for (int i = 0; i < 7; ++i) {
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), src.size());
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  std::printf("copy %.9g\n", t[3]);
  std::printf("stream %.9g\n", seconds(stream));
  std::printf("gather %.9g\n", seconds(gather<0, 0>));
  std::printf("gather_l1_64 %.9g\n", seconds(gather<64, 0>));
  std::printf("gather_l2_256 %.9g\n", seconds(gather<0, 256>));
  std::printf("gather_l1_32_l2_256 %.9g\n", seconds(gather<32, 256>));
  std::printf("spmv %.9g\n", seconds(spmv<false>));
  std::printf("spmv_prefetch %.9g\n", seconds(spmv<true>));
  return static_cast<int>(sink[0] == 12345.f);
}
