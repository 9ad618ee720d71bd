/* Guest test of the rdmx memory domain through UCX's PUBLIC UCT API only, as any UCX program
 * would use it (libuct_rdmx.so preloaded): for every MD of component rdmx, register a buffer,
 * pack its key and unpack it, and check against the kernel's own view (`rdma resource show mr`)
 * that an MR of this process with the packed rkey and that length exists; after the MD is closed no
 * MR and no PD of this process may be left. Prints what it sees; exits non-zero on the first
 * failure. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "uct_test_util.h"

enum { kBufferSize = 1 << 20 };

static void check_md(uct_component_h component, const char* md_name) {
  uct_md_config_t* config;
  uct_md_h md;
  uct_md_attr_t attr;
  uct_mem_h memh;
  uct_rkey_bundle_t bundle;
  char mrs[4096], want[64];

  CHECK_OK(uct_md_config_read(component, NULL, NULL, &config), "uct_md_config_read");
  CHECK_OK(uct_md_open(component, md_name, config, &md), "uct_md_open");
  uct_config_release(config);

  CHECK_OK(uct_md_query(md, &attr), "uct_md_query");
  printf(
      "%s: component %s, flags 0x%lx, max_reg %zu, rkey_packed_size %zu, reg_cost %.0f ns + "
      "%.3f ns/B\n",
      md_name, attr.component_name, (unsigned long)attr.cap.flags, attr.cap.max_reg,
      attr.rkey_packed_size, attr.reg_cost.c * 1e9, attr.reg_cost.m * 1e9);
  CHECK(strcmp(attr.component_name, "rdmx") == 0, "component name %s", attr.component_name);
  CHECK((attr.cap.flags & UCT_MD_FLAG_REG) && (attr.cap.flags & UCT_MD_FLAG_NEED_RKEY),
        "flags 0x%lx lack REG or NEED_RKEY", (unsigned long)attr.cap.flags);
  CHECK(attr.rkey_packed_size > 0 && attr.rkey_packed_size <= 64, "rkey_packed_size %zu",
        attr.rkey_packed_size);

  void* buffer = malloc(kBufferSize);
  CHECK(buffer != NULL, "malloc");
  memset(buffer, 0x5a, kBufferSize);
  /* Timed beside the cost the MD reports, for the record only: under emulation it says little
   * about hardware. */
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK_OK(uct_md_mem_reg(md, buffer, kBufferSize, UCT_MD_MEM_ACCESS_ALL, &memh), "uct_md_mem_reg");
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("%s: registering %d bytes took %.0f ns (reported cost %.0f ns)\n", md_name, kBufferSize,
         (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec),
         (attr.reg_cost.c + attr.reg_cost.m * kBufferSize) * 1e9);
  void* packed = calloc(1, attr.rkey_packed_size);
  CHECK(packed != NULL, "calloc");
  CHECK_OK(uct_md_mkey_pack(md, memh, packed), "uct_md_mkey_pack");
  CHECK_OK(uct_rkey_unpack(component, packed, &bundle), "uct_rkey_unpack");
  /* The packed key starts with the MD's rkey, little-endian (plugin/ucx/md_format.h); the
   * entries of rdmx_rc workers follow (none here: no interface is open). */
  const uint8_t* p = packed;
  const unsigned long rkey = (unsigned long)p[0] | ((unsigned long)p[1] << 8) |
                             ((unsigned long)p[2] << 16) | ((unsigned long)p[3] << 24);
  printf("%s: registered %p (%d bytes), packed rkey 0x%lx\n", md_name, buffer, kBufferSize, rkey);

  /* The kernel lists every MR with its rkey and length: ours must be there, once. */
  CHECK(own_resources("mr", mrs, sizeof(mrs)) == 1, "expected 1 MR of this process, have:\n%s",
        mrs);
  printf("rdma resource show mr: %s", mrs);
  snprintf(want, sizeof(want), " rkey 0x%lx ", rkey);
  CHECK(strstr(mrs, want) != NULL, "packed rkey 0x%lx is not the MR's", rkey);
  snprintf(want, sizeof(want), " mrlen %d ", kBufferSize);
  CHECK(strstr(mrs, want) != NULL, "the MR's length is not %d", kBufferSize);

  CHECK_OK(uct_rkey_release(component, &bundle), "uct_rkey_release");
  CHECK_OK(uct_md_mem_dereg(md, memh), "uct_md_mem_dereg");
  CHECK(own_resources("mr", mrs, sizeof(mrs)) == 0, "MR left after dereg:\n%s", mrs);
  uct_md_close(md);
  CHECK(own_resources("pd", mrs, sizeof(mrs)) == 0, "PD left after uct_md_close:\n%s", mrs);
  printf("%s: no MR and no PD left after close\n", md_name);
  free(packed);
  free(buffer);
}

int main(void) {
  uct_component_h* components;
  uct_md_resource_desc_t* mds;
  unsigned num_mds;
  const uct_component_h rdmx = find_rdmx(&components, &mds, &num_mds);
  for (unsigned j = 0; j < num_mds; ++j) {
    check_md(rdmx, mds[j].md_name);
  }
  free(mds);
  uct_release_component_list(components);
  CHECK(num_mds > 0, "component rdmx has no memory domain");
  printf("PASS: %u rdmx memory domain(s)\n", num_mds);
  return 0;
}
