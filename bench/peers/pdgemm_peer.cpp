// pdgemm_peer: ScaLAPACK's pdgemm/psgemm on a 2D block-cyclic layout, the peer
// `meshtrain bench matmul` is compared against (bench/matmul_vs_pdgemm.py).
//
//   mpirun -n 4 pdgemm_peer --m 2048 --n 2048 --k 2048 --grid 2x2 --nb 256
//          [--dtype f64|f32] [--transa N|T] [--transb N|T] [--warmup 2] [--reps 5] [--seed 1]
//   pdgemm_peer --single --m 2048 --n 2048 --k 2048      # one local dgemm: the single-rank rate
//
// Layout: square NB x NB blocks, a P x Q process grid in row-major rank order
// (BLACS "Row": rank r is grid cell (r / Q, r % Q)), source process (0, 0).
// The matrices are a function of their global indices (the same function as
// src/meshtrain/linalg/matrix_values.h, written out here so the peer stands
// alone): A uses seed, B seed + 1, C's initial values seed + 2. Stored A is
// M x K (K x M with --transa T), B is K x N (N x K with --transb T), and the run
// computes C = 1 * op(A) op(B) + 0 * C.
//
// Each timed call sits between an MPI_Barrier and MPI_Wtime pair; rank 0
// prints one JSON line with the median and the minimum. Every call (warm-up
// included) is checked: max |C - C_ref| / (K eps max|A| max|B|) over 64 sampled
// entries whose reference is summed in long double from the element function.
//
// ScaLAPACK 2.2.1 ships no C header, so the entry points are declared below
// (32-bit integers, Fortran-style pointer arguments, column-major local arrays,
// 1-based global indices).
#define OMPI_SKIP_MPICXX 1  // the C API only (no deprecated C++ bindings to link)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cblas.h>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
void Cblacs_get(int icontxt, int what, int* val);
void Cblacs_gridinit(int* icontxt, const char* order, int nprow, int npcol);
void Cblacs_gridinfo(int icontxt, int* nprow, int* npcol, int* myrow, int* mycol);
void Cblacs_gridexit(int icontxt);
void Cblacs_exit(int notdone);
int numroc_(const int* n, const int* nb, const int* iproc, const int* isrcproc, const int* nprocs);
void descinit_(int* desc, const int* m, const int* n, const int* mb, const int* nb, const int* irsrc,
               const int* icsrc, const int* ictxt, const int* lld, int* info);
void pdgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
             const double* alpha, const double* a, const int* ia, const int* ja, const int* desca,
             const double* b, const int* ib, const int* jb, const int* descb, const double* beta, double* c,
             const int* ic, const int* jc, const int* descc);
void psgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
             const float* alpha, const float* a, const int* ia, const int* ja, const int* desca,
             const float* b, const int* ib, const int* jb, const int* descb, const float* beta, float* c,
             const int* ic, const int* jc, const int* descc);
}

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Element (i, j) (0-based, of the stored matrix) of matrix number `seed`: uniform in [-1, 1).
double matrix_value(uint64_t seed, int64_t i, int64_t j) {
  const uint64_t h = splitmix64(seed * 0x100000001B3ull ^ (uint64_t(i) << 32 ^ uint64_t(j)));
  return double(h >> 11) * 0x1.0p-53 * 2.0 - 1.0;
}

struct UsageError {
  std::string msg;
};

struct Args {
  long m = 0, n = 0, k = 0;
  int p = 0, q = 0;
  int nb = 0;
  std::string dtype = "f64";
  char transa = 'N', transb = 'N';
  int warmup = 2, reps = 5;
  uint64_t seed = 1;
  bool single = false;
};

const char* kUsage =
    "usage: pdgemm_peer --m M --n N --k K --grid PxQ --nb NB [--dtype f64|f32] [--transa N|T]\n"
    "                   [--transb N|T] [--warmup 2] [--reps 5] [--seed 1]\n"
    "       pdgemm_peer --single --m M --n N --k K [--dtype f64|f32] [--transa N|T] [--transb N|T]\n"
    "                   [--warmup 2] [--reps 5] [--seed 1]   (one rank: local OpenBLAS gemm)\n";

long parse_long(const std::string& flag, const char* s) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0') throw UsageError{flag + " needs an integer (got '" + s + "')"};
  return v;
}

char parse_trans(const std::string& flag, const std::string& s) {
  if (s == "N" || s == "n") return 'N';
  if (s == "T" || s == "t") return 'T';
  throw UsageError{flag + " must be N or T (got '" + s + "')"};
}

Args parse_args(int argc, char** argv, int ranks) {
  Args a;
  bool have_grid = false;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--help" || f == "-h") throw UsageError{""};
    if (f == "--single") {
      a.single = true;
      continue;
    }
    if (i + 1 >= argc) throw UsageError{f + " needs a value"};
    const char* v = argv[++i];
    if (f == "--m") a.m = parse_long(f, v);
    else if (f == "--n") a.n = parse_long(f, v);
    else if (f == "--k") a.k = parse_long(f, v);
    else if (f == "--nb") a.nb = int(parse_long(f, v));
    else if (f == "--warmup") a.warmup = int(parse_long(f, v));
    else if (f == "--reps") a.reps = int(parse_long(f, v));
    else if (f == "--seed") a.seed = uint64_t(parse_long(f, v));
    else if (f == "--dtype") a.dtype = v;
    else if (f == "--transa") a.transa = parse_trans(f, v);
    else if (f == "--transb") a.transb = parse_trans(f, v);
    else if (f == "--grid") {
      const std::string g = v;
      const size_t x = g.find_first_of("xX");
      if (x == std::string::npos) throw UsageError{"--grid must be PxQ, e.g. 2x2 (got '" + g + "')"};
      a.p = int(parse_long("--grid", g.substr(0, x).c_str()));
      a.q = int(parse_long("--grid", g.substr(x + 1).c_str()));
      if (a.p < 1 || a.q < 1) throw UsageError{"--grid needs positive P and Q (got '" + g + "')"};
      have_grid = true;
    } else {
      throw UsageError{"unknown argument '" + f + "'"};
    }
  }
  if (a.m < 1 || a.n < 1 || a.k < 1)
    throw UsageError{"--m, --n and --k must be positive (got " + std::to_string(a.m) + ", " + std::to_string(a.n) +
                     ", " + std::to_string(a.k) + ")"};
  if (a.m > INT32_MAX || a.n > INT32_MAX || a.k > INT32_MAX)
    throw UsageError{"--m, --n and --k must fit ScaLAPACK's 32-bit integers"};
  if (a.dtype != "f64" && a.dtype != "f32") throw UsageError{"unknown --dtype '" + a.dtype + "' (f64 or f32)"};
  if (a.reps < 1 || a.warmup < 0) throw UsageError{"--reps must be >= 1 and --warmup >= 0"};
  if (a.single) {
    if (ranks != 1)
      throw UsageError{"--single runs one local gemm on one rank (got " + std::to_string(ranks) +
                       " ranks): run it without mpirun or with -np 1"};
    return a;
  }
  if (!have_grid) throw UsageError{"--grid PxQ is required"};
  if (a.nb < 1) throw UsageError{"--nb must be positive (got " + std::to_string(a.nb) + ")"};
  if (long(a.p) * a.q != ranks)
    throw UsageError{"--grid " + std::to_string(a.p) + "x" + std::to_string(a.q) + " has " +
                     std::to_string(long(a.p) * a.q) + " processes but mpirun started " + std::to_string(ranks) +
                     " ranks"};
  return a;
}

// 0-based global index of local index l on process coordinate `me` of `procs` (block nb, source 0).
inline int64_t global_index(int64_t l, int nb, int me, int procs) {
  return ((l / nb) * procs + me) * nb + l % nb;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// The 64 sampled entries of C, chosen from the seed alone (identical on every rank).
struct Sample {
  int64_t i, j;
  long double ref;
};

// op(A)(i, l) of the stored matrix `seed`, rounded to the run's element type T.
template <typename T>
inline long double op_value(uint64_t seed, char trans, int64_t i, int64_t l) {
  return static_cast<long double>(static_cast<T>(trans == 'N' ? matrix_value(seed, i, l) : matrix_value(seed, l, i)));
}

template <typename T>
std::vector<Sample> samples(const Args& a) {
  std::vector<Sample> s(64);
  uint64_t h = splitmix64(a.seed * 0x9E3779B97F4A7C15ull + 12345);
  for (int t = 0; t < 64; ++t) {
    h = splitmix64(h);
    s[t].i = int64_t((h >> 32) % uint64_t(a.m));
    s[t].j = int64_t((h & 0xffffffffull) % uint64_t(a.n));
  }
  s[0].i = 0, s[0].j = 0;  // both corners, whatever the hash picks
  s[1].i = a.m - 1, s[1].j = a.n - 1;
  return s;
}

template <typename T>
void reference(const Args& a, Sample& s) {
  long double acc = 0;
  for (int64_t l = 0; l < a.k; ++l)
    acc += op_value<T>(a.seed, a.transa, s.i, l) * op_value<T>(a.seed + 1, a.transb, l, s.j);
  s.ref = acc;
}

std::string json_common(const Args& a) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "\"m\":%ld,\"n\":%ld,\"k\":%ld,", a.m, a.n, a.k);
  std::string s = buf;
  if (!a.single) {
    std::snprintf(buf, sizeof buf, "\"grid\":\"%dx%d\",\"nb\":%d,", a.p, a.q, a.nb);
    s += buf;
  }
  std::snprintf(buf, sizeof buf, "\"dtype\":\"%s\",\"transa\":\"%c\",\"transb\":\"%c\",", a.dtype.c_str(), a.transa,
                a.transb);
  return s + buf;
}

void print_result(const char* peer, const char* routine, const Args& a, int ranks, const std::vector<double>& times,
                  double error) {
  const double med = median(times), mn = *std::min_element(times.begin(), times.end());
  const double flops = 2.0 * double(a.m) * double(a.n) * double(a.k);
  std::printf(
      "{\"peer\":\"%s\",\"routine\":\"%s\",%s\"ranks\":%d,\"threads\":%d,\"warmup\":%d,\"reps\":%d,\"seed\":%llu,"
      "\"time_ms_median\":%.4f,\"time_ms_min\":%.4f,\"gflops\":%.3f,\"gflops_max\":%.3f,\"error\":%.4g,"
      "\"error_ok\":%s}\n",
      peer, routine, json_common(a).c_str(), ranks, openblas_get_num_threads(), a.warmup, a.reps,
      static_cast<unsigned long long>(a.seed), med * 1e3, mn * 1e3, flops / med * 1e-9, flops / mn * 1e-9, error,
      error < 1.0 ? "true" : "false");
  std::fflush(stdout);
}

// --single: one rank, the whole problem in one cblas gemm of the same OpenBLAS.
template <typename T>
int run_single(const Args& a) {
  const bool ta = a.transa == 'T', tb = a.transb == 'T';
  const int64_t ar = ta ? a.k : a.m, ac = ta ? a.m : a.k;  // stored A: ar x ac
  const int64_t br = tb ? a.n : a.k, bc = tb ? a.k : a.n;
  std::vector<T> A(size_t(ar * ac)), B(size_t(br * bc)), C(size_t(a.m * a.n));
  double amax = 0, bmax = 0;
  for (int64_t j = 0; j < ac; ++j)
    for (int64_t i = 0; i < ar; ++i) {
      A[size_t(i + j * ar)] = T(matrix_value(a.seed, i, j));
      amax = std::max(amax, std::fabs(double(A[size_t(i + j * ar)])));
    }
  for (int64_t j = 0; j < bc; ++j)
    for (int64_t i = 0; i < br; ++i) {
      B[size_t(i + j * br)] = T(matrix_value(a.seed + 1, i, j));
      bmax = std::max(bmax, std::fabs(double(B[size_t(i + j * br)])));
    }
  std::vector<Sample> smp = samples<T>(a);
  for (Sample& s : smp) reference<T>(a, s);
  const double eps = sizeof(T) == 8 ? DBL_EPSILON : FLT_EPSILON;
  const double scale = double(a.k) * eps * amax * bmax;
  std::vector<double> times;
  double error = 0;
  for (int r = 0; r < a.warmup + a.reps; ++r) {
    for (int64_t j = 0; j < a.n; ++j)
      for (int64_t i = 0; i < a.m; ++i) C[size_t(i + j * a.m)] = T(matrix_value(a.seed + 2, i, j));
    const double t0 = MPI_Wtime();
    if constexpr (sizeof(T) == 8)
      cblas_dgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(a.m), int(a.n),
                  int(a.k), 1.0, A.data(), int(ar), B.data(), int(br), 0.0, C.data(), int(a.m));
    else
      cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(a.m), int(a.n),
                  int(a.k), 1.0f, A.data(), int(ar), B.data(), int(br), 0.0f, C.data(), int(a.m));
    const double t1 = MPI_Wtime();
    if (r >= a.warmup) times.push_back(t1 - t0);
    for (const Sample& s : smp) {
      const long double d = static_cast<long double>(C[size_t(s.i + s.j * a.m)]) - s.ref;
      error = std::max(error, double(std::fabs(d)) / scale);
    }
  }
  print_result("openblas-dgemm", sizeof(T) == 8 ? "dgemm" : "sgemm", a, 1, times, error);
  return error < 1.0 ? 0 : 1;
}

// A distributed matrix: descriptor and this rank's column-major block-cyclic piece.
template <typename T>
struct DistMatrix {
  int rows = 0, cols = 0;  // global
  int lrows = 0, lcols = 0, lld = 1;
  int desc[9] = {};
  std::vector<T> data;
};

template <typename T>
DistMatrix<T> make_matrix(int rows, int cols, int nb, int ctxt, int p, int q, int myrow, int mycol) {
  DistMatrix<T> d;
  d.rows = rows, d.cols = cols;
  const int zero = 0;
  d.lrows = numroc_(&rows, &nb, &myrow, &zero, &p);
  d.lcols = numroc_(&cols, &nb, &mycol, &zero, &q);
  d.lld = std::max(1, d.lrows);
  int info = 0;
  descinit_(d.desc, &rows, &cols, &nb, &nb, &zero, &zero, &ctxt, &d.lld, &info);
  if (info != 0) {
    std::fprintf(stderr, "pdgemm_peer: descinit_ failed (info %d) for a %d x %d matrix\n", info, rows, cols);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  d.data.assign(size_t(d.lld) * size_t(std::max(1, d.lcols)), T(0));
  return d;
}

// Fills the local piece with matrix `seed`; returns the local max |element|.
template <typename T>
double fill(DistMatrix<T>& d, uint64_t seed, int nb, int p, int q, int myrow, int mycol) {
  double amax = 0;
  for (int lj = 0; lj < d.lcols; ++lj) {
    const int64_t j = global_index(lj, nb, mycol, q);
    T* col = d.data.data() + size_t(lj) * size_t(d.lld);
    for (int li = 0; li < d.lrows; ++li) {
      col[li] = T(matrix_value(seed, global_index(li, nb, myrow, p), j));
      amax = std::max(amax, std::fabs(double(col[li])));
    }
  }
  return amax;
}

template <typename T>
int run_distributed(const Args& a, int rank, int ranks) {
  int ctxt = 0;
  Cblacs_get(-1, 0, &ctxt);  // the system context: MPI_COMM_WORLD
  Cblacs_gridinit(&ctxt, "Row", a.p, a.q);
  int p = 0, q = 0, myrow = -1, mycol = -1;
  Cblacs_gridinfo(ctxt, &p, &q, &myrow, &mycol);
  if (p != a.p || q != a.q || myrow != rank / a.q || mycol != rank % a.q) {
    std::fprintf(stderr, "pdgemm_peer: rank %d got BLACS grid %dx%d cell (%d,%d), expected %dx%d cell (%d,%d)\n",
                 rank, p, q, myrow, mycol, a.p, a.q, rank / a.q, rank % a.q);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  const int m = int(a.m), n = int(a.n), k = int(a.k), nb = a.nb;
  DistMatrix<T> A = a.transa == 'N' ? make_matrix<T>(m, k, nb, ctxt, p, q, myrow, mycol)
                                    : make_matrix<T>(k, m, nb, ctxt, p, q, myrow, mycol);
  DistMatrix<T> B = a.transb == 'N' ? make_matrix<T>(k, n, nb, ctxt, p, q, myrow, mycol)
                                    : make_matrix<T>(n, k, nb, ctxt, p, q, myrow, mycol);
  DistMatrix<T> C = make_matrix<T>(m, n, nb, ctxt, p, q, myrow, mycol);
  double maxes[2] = {fill(A, a.seed, nb, p, q, myrow, mycol), fill(B, a.seed + 1, nb, p, q, myrow, mycol)};
  MPI_Allreduce(MPI_IN_PLACE, maxes, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  const double eps = sizeof(T) == 8 ? DBL_EPSILON : FLT_EPSILON;
  const double scale = double(a.k) * eps * maxes[0] * maxes[1];

  // The sampled entries this rank owns, with their long-double references.
  std::vector<Sample> mine;
  std::vector<size_t> where;
  for (Sample s : samples<T>(a)) {
    const int owner_row = int((s.i / nb) % p), owner_col = int((s.j / nb) % q);
    if (owner_row != myrow || owner_col != mycol) continue;
    reference<T>(a, s);
    mine.push_back(s);
    const int64_t li = (s.i / (int64_t(nb) * p)) * nb + s.i % nb, lj = (s.j / (int64_t(nb) * q)) * nb + s.j % nb;
    where.push_back(size_t(li) + size_t(lj) * size_t(C.lld));
  }

  const int one = 1;
  const char ta = a.transa, tb = a.transb;
  std::vector<double> times;
  double error = 0;
  for (int r = 0; r < a.warmup + a.reps; ++r) {
    fill(C, a.seed + 2, nb, p, q, myrow, mycol);  // C's initial values (beta = 0 ignores them)
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    if constexpr (sizeof(T) == 8) {
      const double alpha = 1.0, beta = 0.0;
      pdgemm_(&ta, &tb, &m, &n, &k, &alpha, A.data.data(), &one, &one, A.desc, B.data.data(), &one, &one, B.desc,
              &beta, C.data.data(), &one, &one, C.desc);
    } else {
      const float alpha = 1.0f, beta = 0.0f;
      psgemm_(&ta, &tb, &m, &n, &k, &alpha, A.data.data(), &one, &one, A.desc, B.data.data(), &one, &one, B.desc,
              &beta, C.data.data(), &one, &one, C.desc);
    }
    const double t1 = MPI_Wtime();
    // The time of a call is the slowest rank's.
    double dt = t1 - t0;
    MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (r >= a.warmup) times.push_back(dt);
    for (size_t t = 0; t < mine.size(); ++t) {
      const long double d = static_cast<long double>(C.data[where[t]]) - mine[t].ref;
      error = std::max(error, double(std::fabs(d)) / scale);
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, &error, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) print_result("scalapack-pdgemm", sizeof(T) == 8 ? "pdgemm" : "psgemm", a, ranks, times, error);
  Cblacs_gridexit(ctxt);
  return error < 1.0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  Args a;
  try {
    a = parse_args(argc, argv, ranks);
  } catch (const UsageError& e) {
    if (rank == 0) {
      if (!e.msg.empty()) std::fprintf(stderr, "pdgemm_peer: %s\n", e.msg.c_str());
      std::fputs(kUsage, e.msg.empty() ? stdout : stderr);
    }
    MPI_Finalize();
    return e.msg.empty() ? 0 : 2;
  }
  int rc = 0;
  if (a.single)
    rc = a.dtype == "f64" ? run_single<double>(a) : run_single<float>(a);
  else
    rc = a.dtype == "f64" ? run_distributed<double>(a, rank, ranks) : run_distributed<float>(a, rank, ranks);
  if (!a.single) Cblacs_exit(1);  // 1: leave MPI to us
  MPI_Finalize();
  return rc;
}
