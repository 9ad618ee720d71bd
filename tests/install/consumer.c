/*
 * An application of the installed rdmx: built by install_test.sh against <prefix>/include and
 * <prefix>/lib only (no build tree), as a user would. It names every public function, so the
 * link fails if librdmx.so does not export one, and runs what needs no device.
 */
#include <rdmx/rdmx.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*any_fn)(void);
#define FN(f) \
  { #f, (any_fn)(f) }

static const struct {
  const char* name;
  any_fn fn;
} api[] = {
    FN(rdmx_strerror),
    FN(rdmx_config_init),
    FN(rdmx_config_from_env),
    FN(rdmx_worker_create),
    FN(rdmx_worker_destroy),
    FN(rdmx_worker_address),
    FN(rdmx_worker_progress),
    FN(rdmx_worker_poll),
    FN(rdmx_worker_idle),
    FN(rdmx_worker_uid),
    FN(rdmx_ep_create),
    FN(rdmx_ep_destroy),
    FN(rdmx_worker_set_peer_failure_callback),
    FN(rdmx_tag_send),
    FN(rdmx_tag_recv),
    FN(rdmx_tag_probe),
    FN(rdmx_tag_msg_recv),
    FN(rdmx_request_test),
    FN(rdmx_request_wait),
    FN(rdmx_request_cancel),
    FN(rdmx_worker_stats),
};

static int failures;

static void expect(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "consumer: FAILED: %s\n", what);
    ++failures;
  }
}

int main(void) {
  size_t i;
  int code;
  rdmx_config_t config;
  rdmx_worker_t* worker = NULL;

  /* The link is the check; this loop is a run-time use of the table, so that no optimiser drops
   * it and its references to the library (an unused table keeps 4 of the 19 it had at -O2). */
  for (i = 0; i < sizeof(api) / sizeof(api[0]); ++i) {
    expect(api[i].fn != NULL, api[i].name);
  }
  /* Every code has its own text; an unknown one still gets a text. */
  for (code = RDMX_ERR_TIMED_OUT; code <= RDMX_INPROGRESS; ++code) {
    const char* text = rdmx_strerror(code);
    expect(text != NULL && text[0] != '\0', "rdmx_strerror gives a text for every code");
    if (text != NULL && code > RDMX_ERR_TIMED_OUT) {
      expect(strcmp(text, rdmx_strerror(code - 1)) != 0, "rdmx_strerror texts are distinct");
    }
  }
  expect(rdmx_strerror(-1000) != NULL, "rdmx_strerror of an unknown code");

  rdmx_config_init(&config);
  expect(rdmx_config_from_env(&config) == RDMX_OK, "rdmx_config_from_env with a clean environment");
  /* install_test.sh names a device that does not exist: a clear error, no worker. */
  code = rdmx_worker_create(&config, &worker);
  printf("consumer: rdmx_worker_create on RDMX_DEVICE=%s: %s\n", getenv("RDMX_DEVICE"),
         rdmx_strerror(code));
  expect(code == RDMX_ERR_NO_DEVICE,
         "rdmx_worker_create on a missing device is RDMX_ERR_NO_DEVICE");
  expect(worker == NULL, "no worker after a failed create");
  expect(rdmx_worker_create(&config, NULL) == RDMX_ERR_INVALID_PARAM,
         "rdmx_worker_create without a place for the worker is RDMX_ERR_INVALID_PARAM");
  if (failures == 0) {
    printf("consumer: %zu public functions linked, all checks passed\n", i);
  }
  return failures == 0 ? 0 : 1;
}
