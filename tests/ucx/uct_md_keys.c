/* Guest test of the rdmx memory domain through UCX's PUBLIC UCT API only, as any UCX program
 * would use it (libuct_rdmx.so preloaded): for every MD of component rdmx, register a buffer,
 * pack its key, unpack it, and check against the kernel's own view (`rdma resource show mr`)
 * that an MR of this process with that rkey and length exists; after the MD is closed no MR and
 * no PD of this process may be left. Prints what it sees; exits non-zero on the first failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uct/api/uct.h>
#include <unistd.h>

#define CHECK(cond, ...)                     \
  do {                                       \
    if (!(cond)) {                           \
      fprintf(stderr, "FAIL: " __VA_ARGS__); \
      fputc('\n', stderr);                   \
      exit(1);                               \
    }                                        \
  } while (0)

#define CHECK_OK(status, what) CHECK((status) == UCS_OK, "%s: %s", what, ucs_status_string(status))

enum { kBufferSize = 1 << 20 };

/* The lines of `rdma resource show KIND` that belong to this process, into out (may be NULL).
 * Returns how many there are. */
static int own_resources(const char* kind, char* out, size_t out_size) {
  char cmd[64], line[512], pid[32];
  int n = 0;
  snprintf(cmd, sizeof(cmd), "rdma resource show %s", kind);
  snprintf(pid, sizeof(pid), " pid %d ", (int)getpid());
  FILE* p = popen(cmd, "r");
  CHECK(p != NULL, "popen(%s)", cmd);
  if (out != NULL && out_size > 0) {
    out[0] = '\0';
  }
  while (fgets(line, sizeof(line), p) != NULL) {
    if (strstr(line, pid) == NULL) {
      continue;
    }
    ++n;
    if (out != NULL && strlen(out) + strlen(line) < out_size) {
      strcat(out, line);
    }
  }
  CHECK(pclose(p) == 0, "%s failed", cmd);
  return n;
}

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
  printf("%s: registered %p (%d bytes), unpacked rkey 0x%lx\n", md_name, buffer, kBufferSize,
         (unsigned long)bundle.rkey);

  /* The kernel lists every MR with its rkey and length: ours must be there, once. */
  CHECK(own_resources("mr", mrs, sizeof(mrs)) == 1, "expected 1 MR of this process, have:\n%s",
        mrs);
  printf("rdma resource show mr: %s", mrs);
  snprintf(want, sizeof(want), " rkey 0x%lx ", (unsigned long)bundle.rkey);
  CHECK(strstr(mrs, want) != NULL, "unpacked rkey 0x%lx is not the MR's",
        (unsigned long)bundle.rkey);
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
  unsigned num_components, i, j, mds = 0;

  CHECK_OK(uct_query_components(&components, &num_components), "uct_query_components");
  for (i = 0; i < num_components; ++i) {
    uct_component_attr_t attr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                                               UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};
    CHECK_OK(uct_component_query(components[i], &attr), "uct_component_query");
    if (strcmp(attr.name, "rdmx") != 0) {
      continue;
    }
    uct_md_resource_desc_t* resources = calloc(attr.md_resource_count + 1, sizeof(*resources));
    CHECK(resources != NULL, "calloc");
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = resources;
    CHECK_OK(uct_component_query(components[i], &attr), "uct_component_query(md_resources)");
    for (j = 0; j < attr.md_resource_count; ++j, ++mds) {
      check_md(components[i], resources[j].md_name);
    }
    free(resources);
  }
  uct_release_component_list(components);
  CHECK(mds > 0, "no memory domain of component rdmx (is libuct_rdmx.so preloaded?)");
  printf("PASS: %u rdmx memory domain(s)\n", mds);
  return 0;
}
