/* MPI collective sweep in nccl-tests' row format (out-of-place and in-place),
 * for comparison with `meshtrain bench comm`. Same sizes, warm-up, iteration
 * counts (5x below 1 MiB), timing (slowest rank's mean) and busbw.
 *   mpirun -n 2 mpi_allreduce_perf [-b 8] [-e 64M] [-f 2] [-w 5] [-n 20] [-o allreduce|reduce_scatter|allgather|broadcast] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t parse_size(const char* s) {
  char* end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  else if (*end == 'M') v *= 1024 * 1024;
  else if (*end == 'G') v *= 1024.0 * 1024 * 1024;
  return (size_t)v;
}

static void run(const char* op, const float* send, float* recv, int count, int n, int rank, int in_place, MPI_Comm comm) {
  if (!strcmp(op, "allreduce")) {
    MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, count, MPI_FLOAT, MPI_SUM, comm);
  } else if (!strcmp(op, "reduce_scatter")) {
    int per = count / n;
    MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : send, in_place ? recv : recv, per, MPI_FLOAT, MPI_SUM, comm);
  } else if (!strcmp(op, "allgather")) {
    int per = count / n;
    MPI_Allgather(in_place ? MPI_IN_PLACE : send + (size_t)rank * per, per, MPI_FLOAT, recv, per, MPI_FLOAT, comm);
  } else {
    MPI_Bcast(recv, count, MPI_FLOAT, 0, comm);
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  size_t lo = 8, hi = 64u << 20;
  double factor = 2;
  int warm = 5, iters = 20;
  const char* op = "allreduce";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-b")) lo = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-e")) hi = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-f")) factor = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "-w")) warm = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-n")) iters = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-o")) op = argv[i + 1];
  }
  float* send = malloc(hi + 64);
  float* recv = malloc(hi + 64);
  memset(send, 0, hi + 64);
  memset(recv, 0, hi + 64);
  double bf = !strcmp(op, "allreduce") ? 2.0 * (n - 1) / n : !strcmp(op, "broadcast") ? 1.0 : (double)(n - 1) / n;
  if (rank == 0) {
    printf("# mpi_allreduce_perf: %s (Open MPI/MPICH native), %d ranks, warmup %d, iters %d\n", op, n, warm, iters);
    printf("#%11s %12s %8s %6s %5s %9s %8s %8s %6s %9s %8s %8s %6s\n", "size", "count", "type", "redop", "root",
           "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  }
  for (size_t bytes = lo; bytes <= hi; bytes = (size_t)(bytes * factor) > bytes ? (size_t)(bytes * factor) : bytes + 1) {
    int count = (int)(bytes / 4 ? bytes / 4 : 1);
    if (strcmp(op, "allreduce") && strcmp(op, "broadcast")) count = (count / n > 0) ? count / n * n : n;
    size_t sz = (size_t)count * 4;
    int it = sz <= (1u << 20) ? iters * 5 : iters;
    double us[2];
    long long wrong[2] = {0, 0};
    for (int v = 0; v < 2; ++v) {
      for (int i = 0; i < count; ++i) send[i] = recv[i] = (float)(rank + 1);
      for (int i = 0; i < warm; ++i) run(op, send, recv, count, n, rank, v, MPI_COMM_WORLD);
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int i = 0; i < it; ++i) run(op, send, recv, count, n, rank, v, MPI_COMM_WORLD);
      double mine = (MPI_Wtime() - t0) / it * 1e6;
      MPI_Allreduce(&mine, &us[v], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (!strcmp(op, "allreduce") && v == 0) {  /* check one fresh out-of-place run */
        for (int i = 0; i < count; ++i) send[i] = (float)(rank + 1);
        run(op, send, recv, count, n, rank, 0, MPI_COMM_WORLD);
        long long w = 0;
        for (int i = 0; i < count; ++i) w += recv[i] != (float)(n * (n + 1) / 2);
        MPI_Allreduce(&w, &wrong[v], 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
      }
    }
    if (rank == 0) {
      double a0 = sz / us[0] / 1e3, a1 = sz / us[1] / 1e3;
      printf(" %11zu %12d %8s %6s %5d %9.2f %8.2f %8.2f %6lld %9.2f %8.2f %8.2f %6lld\n", sz, count, "float", "sum",
             -1, us[0], a0, a0 * bf, wrong[0], us[1], a1, a1 * bf, wrong[1]);
      fflush(stdout);
    }
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
