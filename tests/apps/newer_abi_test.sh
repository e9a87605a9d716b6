#!/usr/bin/env bash
# A program built against a newer rdma-core than Debian 12's loads with the
# drop-ins: a C program generated here binds every entry point that
# rdma-core releases 45..64 added, each at its version node (the list below
# is rdma-core v64.0's libibverbs.map.in, librdmacm.map and the mlx5 and
# efa providers' maps, read from its repository), links with -z now so that a missing symbol@version fails at
# load, and runs: one call of each kind shows the unsupported ones fail
# cleanly (EOPNOTSUPP) and repoll_* work (epoll).
#
#   newer_abi_test.sh SHIM_DIR
#
# Exit 0 pass, 1 fail, 77 skip (no C compiler).
set -u

readonly EXIT_SKIP=77
[ $# -eq 1 ] || { echo "usage: $0 SHIM_DIR" >&2; exit 2; }
SHIM=$1
CC=${CC:-cc}
command -v "$CC" >/dev/null || { echo "SKIP: needs a C compiler ($CC)"; exit $EXIT_SKIP; }

# library | version node | symbols
NODES=(
  "ibverbs|IBVERBS_1.15|ibv_alloc_dmah ibv_dealloc_dmah ibv_reg_mr_ex"
  "ibverbs|IBVERBS_1.16|ibv_dm_export_dmabuf_fd ibv_query_port_speed"
  "ibverbs|IBVERBS_1.17|ibv_alloc_buf ibv_free_buf ibv_reg_buf_mr"
  "ibverbs|IBVERBS_1.18|_ibv_query_comp_cntr_caps ibv_create_comp_cntr ibv_destroy_comp_cntr ibv_export_buf_dmabuf_fd ibv_inc_comp_cntr ibv_inc_err_comp_cntr ibv_qp_attach_comp_cntr ibv_read_comp_cntr ibv_read_err_comp_cntr ibv_set_comp_cntr ibv_set_err_comp_cntr"
  "mlx5|MLX5_1.25|mlx5dv_get_data_direct_sysfs_path mlx5dv_reg_dmabuf_mr"
  "mlx5|MLX5_1.25.1|__mlx5dv_create_flow"
  "mlx5|MLX5_1.26|mlx5dv_devx_uar_export_dmabuf_fd"
  "mlx5|MLX5_1.27|_mlx5dv_get_export_sizes mlx5dv_devx_obj_export mlx5dv_devx_obj_import mlx5dv_devx_obj_unimport mlx5dv_devx_umem_export mlx5dv_devx_umem_import mlx5dv_devx_umem_unimport mlx5dv_var_export mlx5dv_var_import mlx5dv_var_unimport"
  "efa|EFA_1.3|efadv_query_mr"
  "efa|EFA_1.4|efadv_query_qp_wqs efadv_query_cq"
  "efa|EFA_1.5|efadv_get_max_sq_depth efadv_get_max_rq_depth"
  "efa|EFA_1.6|efadv_qp_from_ibv_qp_ex"
  "rdmacm|RDMACM_1.4|rdma_query_addrinfo rdma_resolve_addrinfo rdma_write_cm_event"
  "rdmacm|RDMACM_1.5|repoll_create repoll_ctl repoll_wait"
)

TMP=$(mktemp -d /tmp/uroce-newer-abi.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
SRC=$TMP/newer.c
{
  echo '#include <errno.h>'
  echo '#include <stdint.h>'
  echo '#include <stdio.h>'
  echo '#include <sys/epoll.h>'
  echo '#include <unistd.h>'
  n=0
  for entry in "${NODES[@]}"; do
    IFS='|' read -r _ node syms <<<"$entry"
    for s in $syms; do
      echo "extern void ref_$n(void);"
      echo "__asm__(\".symver ref_$n, $s@$node\");"
      n=$((n + 1))
    done
  done
  echo "static void (*const refs[])(void) = {"
  for i in $(seq 0 $((n - 1))); do echo "  ref_$i,"; done
  echo "};"
  cat <<'C'
/* Called through the bound addresses, with the newest headers' signatures. */
typedef void *(*alloc_dmah_fn)(void *, void *);
typedef int (*query_port_speed_fn)(void *, uint32_t, uint64_t *);
typedef int (*repoll_create_fn)(int);
typedef int (*repoll_ctl_fn)(int, int, int, struct epoll_event *);
typedef int (*repoll_wait_fn)(int, struct epoll_event *, int, int);
int main(void) {
  int failed = 0;
  for (size_t i = 0; i < sizeof refs / sizeof refs[0]; ++i)
    if (refs[i] == NULL) { printf("FAIL ref_%zu unbound\n", i); failed = 1; }
  errno = 0;
  if (((alloc_dmah_fn)refs[0])(NULL, NULL) != NULL || errno != EOPNOTSUPP) {
    printf("FAIL ibv_alloc_dmah: want NULL with EOPNOTSUPP\n"); failed = 1;
  }
  uint64_t speed = 0;
  if (((query_port_speed_fn)refs[4])(NULL, 1, &speed) != EOPNOTSUPP) {
    printf("FAIL ibv_query_port_speed: want EOPNOTSUPP\n"); failed = 1;
  }
  const size_t last = sizeof refs / sizeof refs[0];
  int ep = ((repoll_create_fn)refs[last - 3])(0);
  int p[2];
  if (ep < 0 || pipe(p) != 0) { printf("FAIL repoll_create\n"); return 1; }
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = p[0]};
  if (((repoll_ctl_fn)refs[last - 2])(ep, EPOLL_CTL_ADD, p[0], &ev) != 0) { printf("FAIL repoll_ctl\n"); failed = 1; }
  if (write(p[1], "x", 1) != 1) return 1;
  struct epoll_event out;
  if (((repoll_wait_fn)refs[last - 1])(ep, &out, 1, 1000) != 1 || out.data.fd != p[0]) {
    printf("FAIL repoll_wait: the pipe's event\n"); failed = 1;
  }
  if (!failed) printf("%zu entry points of rdma-core 45..64 bound and callable\n", last);
  return failed;
}
C
} >"$SRC"

if ! "$CC" -o "$TMP/newer" "$SRC" -L"$SHIM" -l:libibverbs.so.1 -l:librdmacm.so.1 -l:libmlx5.so.1 -l:libefa.so.1 -Wl,-z,now \
  -Wl,-rpath,"$SHIM" 2>"$TMP/cc.log"; then
  echo "FAIL: the program does not link against the drop-ins"
  cat "$TMP/cc.log"
  exit 1
fi
if LD_LIBRARY_PATH=$SHIM "$TMP/newer"; then
  echo "PASS newer-abi"
  exit 0
fi
echo "FAIL newer-abi"
exit 1
