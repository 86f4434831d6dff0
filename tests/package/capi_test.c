/* SPDX-License-Identifier: MIT */
#define _DEFAULT_SOURCE 1 /* mkdtemp */
/* The C API compiled as C11 (-pedantic) and run without a device: version,
 * error words and ranges, key encode/decode/format/parse, and the error
 * paths of every entry point that needs no NVMe namespace. The real paths
 * (open, report, takeover, fenced writes) run in the lab: vm-test/tests/engine/test_example_engine.py. */
#include <nvfence/nvfence.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;
static int checks;

#define CHECK(cond)                                                            \
    do {                                                                       \
        ++checks;                                                              \
        if (!(cond)) {                                                         \
            ++failures;                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                      \
    } while (0)

static void test_version(void) {
    CHECK(strcmp(nvf_version(), NVF_VERSION_STRING) == 0);
    CHECK(nvf_version_number() == NVF_VERSION_MAJOR * 10000 + NVF_VERSION_MINOR * 100 + NVF_VERSION_PATCH);
}

static void test_errors(void) {
    CHECK(strcmp(nvf_strerror(0), "success") == 0);
    CHECK(strstr(nvf_strerror(-NVF_ERRC_NOT_NVME), "NVMe") != NULL);
    CHECK(strstr(nvf_strerror(NVF_ERR_RESERVATION_CONFLICT), "Reservation Conflict") != NULL);
    CHECK(strstr(nvf_strerror(-(NVF_ERR_ERRNO_BASE + ENOENT)), "No such file") != NULL);
    CHECK(strstr(nvf_strerror(-NVF_ERRC_NOMEM), "memory") != NULL);
    CHECK(strstr(nvf_strerror(-12345678), "unknown") != NULL);
    /* INT_MIN has no negation: a code outside every range, defined. */
    CHECK(strstr(nvf_strerror(INT_MIN), "unknown nvfence error code") != NULL);
    CHECK(nvf_is_fenced(INT_MIN) == 0);
    CHECK(nvf_exit_code(INT_MIN) == 1);
    CHECK(nvf_err_nvme_status(INT_MIN) == -1 && nvf_err_errno(INT_MIN) == 0);
    /* Every code the library returns has its words, the last ones too. */
    CHECK(strstr(nvf_strerror(-NVF_ERRC_OWN_KEY), "own key") != NULL);
    CHECK(strstr(nvf_strerror(-NVF_ERRC_VIEW_LOST), "view of the device") != NULL);
    CHECK(strstr(nvf_strerror(-NVF_ERRC_EPOCH_OUT_OF_RANGE), "epoch") != NULL);
    CHECK(nvf_exit_code(-NVF_ERRC_OWN_KEY) == 2);
    CHECK(nvf_exit_code(-NVF_ERRC_PERMISSION_DENIED) == 5);
    CHECK(nvf_is_fenced(NVF_ERR_RESERVATION_CONFLICT) == 1);
    CHECK(nvf_is_fenced(-(NVF_ERR_ERRNO_BASE + EBADE)) == 1);
    CHECK(nvf_is_fenced(-NVF_ERRC_FENCED) == 1);
    CHECK(nvf_is_fenced(-NVF_ERRC_TIMEOUT) == 0);
    CHECK(nvf_is_fenced(0) == 0);
    CHECK(nvf_err_nvme_status(NVF_ERR_RESERVATION_CONFLICT) == 0x83);
    CHECK(nvf_err_nvme_status(-NVF_ERRC_FENCED) == -1);
    CHECK(nvf_err_errno(-(NVF_ERR_ERRNO_BASE + EACCES)) == EACCES);
    CHECK(nvf_err_errno(-NVF_ERRC_NOT_NVME) == 0);
    /* The tools' documented exit codes. */
    CHECK(nvf_exit_code(0) == 0);
    CHECK(nvf_exit_code(-NVF_ERRC_NOT_NVME) == 4);
    CHECK(nvf_exit_code(-NVF_ERRC_NO_RESERVATIONS) == 4);
    CHECK(nvf_exit_code(NVF_ERR_RESERVATION_CONFLICT) == 3);
    CHECK(nvf_exit_code(-NVF_ERRC_LOST_RACE) == 6);
    CHECK(nvf_exit_code(-(NVF_ERR_ERRNO_BASE + EPERM)) == 5);
    CHECK(nvf_exit_code(-NVF_ERRC_INVALID_KEY) == 2);
    CHECK(nvf_exit_code(-NVF_ERRC_INTERNAL) == 1);
}

static void test_keys(void) {
    nvf_key_fields f = {7, 2, 41}, g;
    uint64_t key = 0, parsed = 0;
    char text[32], tiny[4];
    CHECK(nvf_key_make(&f, &key) == 0);
    CHECK(key >> 56 == 0xF5);
    CHECK((key & 0xffffffffu) == 41);
    CHECK(nvf_key_decode(key, &g) == 0);
    CHECK(g.tag == 7 && g.node == 2 && g.epoch == 41);
    CHECK(nvf_key_format(key, text, sizeof text) == 0);
    CHECK(strcmp(text, "nf:7:2:41") == 0);
    CHECK(nvf_key_parse("nf:7:2:41", &parsed) == 0 && parsed == key);
    CHECK(nvf_key_format(key, tiny, sizeof tiny) == -NVF_ERRC_TRUNCATED);
    CHECK(strcmp(tiny, "nf:") == 0);
    /* Foreign keys are never decoded; they print and parse as hex. */
    CHECK(nvf_key_decode(0x1234, &g) == -NVF_ERRC_INVALID_KEY);
    CHECK(nvf_key_format(0x1234, text, sizeof text) == 0);
    CHECK(strcmp(text, "0x0000000000001234") == 0);
    CHECK(nvf_key_parse("0x1234", &parsed) == 0 && parsed == 0x1234);
    /* Bad input. */
    f.node = 0;
    CHECK(nvf_key_make(&f, &key) == -NVF_ERRC_INVALID_ARGUMENT);
    CHECK(nvf_key_parse("", &parsed) == -NVF_ERRC_INVALID_KEY);
    CHECK(nvf_key_parse("0x", &parsed) == -NVF_ERRC_INVALID_KEY);
    CHECK(nvf_key_parse("nf:256:1:1", &parsed) == -NVF_ERRC_INVALID_KEY);
    CHECK(nvf_key_parse("0x0", &parsed) == -NVF_ERRC_INVALID_KEY);
    CHECK(nvf_key_parse(NULL, &parsed) == -NVF_ERRC_INVALID_ARGUMENT);
    CHECK(nvf_key_make(NULL, &key) == -NVF_ERRC_INVALID_ARGUMENT);
    CHECK(nvf_key_format(key, NULL, 8) == -NVF_ERRC_INVALID_ARGUMENT);
}

static void test_open_errors(const char *dir) {
    nvf_ns *ns = (nvf_ns *)1;
    nvf_writer *w = (nvf_writer *)1;
    char path[512];
    int rc;
    CHECK(nvf_ns_open("/nonexistent/dev", 0, &ns) == -NVF_ERRC_NOT_FOUND);
    CHECK(ns == NULL);
    CHECK(nvf_ns_open("/dev/null", 0, &ns) == -NVF_ERRC_NOT_NVME);
    CHECK(nvf_ns_open(dir, 0, &ns) == -NVF_ERRC_NOT_NVME);
    snprintf(path, sizeof path, "%s/file", dir);
    {
        FILE *fp = fopen(path, "w");
        CHECK(fp != NULL);
        if (fp) { fputs("data\n", fp); fclose(fp); }
    }
    rc = nvf_ns_open(path, 0, &ns);
    CHECK(rc == -NVF_ERRC_NOT_NVME);
    CHECK(nvf_exit_code(rc) == 4);
    CHECK(nvf_ns_open(NULL, 0, &ns) == -NVF_ERRC_INVALID_ARGUMENT);
    CHECK(nvf_writer_open("/dev/null", NULL, &w) == -NVF_ERRC_NOT_NVME);
    CHECK(w == NULL);
    CHECK(nvf_writer_open(path, NULL, &w) == -NVF_ERRC_NOT_NVME);
    {
        nvf_writer_options wo = NVF_WRITER_OPTIONS_INIT;
        wo.queue_depth = 0;
        CHECK(nvf_writer_open(path, &wo, &w) != 0);
    }
    /* Options structs state their size (nvfence.h "Options structs"): a
     * size below the first version is refused before anything is opened; a
     * caller's larger struct (a newer header) passes when its unknown tail
     * is zero, and is refused when it is not. */
    {
        nvf_writer_options wo = NVF_WRITER_OPTIONS_INIT;
        CHECK(wo.size == sizeof(nvf_writer_options));
        wo.size = 0;
        CHECK(nvf_writer_open("/dev/null", &wo, &w) == -NVF_ERRC_INVALID_ARGUMENT);
        wo.size = sizeof(nvf_writer_options) - 1;
        CHECK(nvf_writer_open("/dev/null", &wo, &w) == -NVF_ERRC_INVALID_ARGUMENT);
        wo.size = sizeof(nvf_writer_options);
        CHECK(nvf_writer_open("/dev/null", &wo, &w) == -NVF_ERRC_NOT_NVME);
    }
    {
        struct { nvf_writer_options o; uint64_t future; } big = {NVF_WRITER_OPTIONS_INIT, 0};
        big.o.size = sizeof big;
        CHECK(nvf_writer_open("/dev/null", &big.o, &w) == -NVF_ERRC_NOT_NVME);
        big.future = 1;
        CHECK(nvf_writer_open("/dev/null", &big.o, &w) == -NVF_ERRC_INVALID_ARGUMENT);
        CHECK(w == NULL);
    }
    {
        nvf_fence_options fo = NVF_FENCE_OPTIONS_INIT;
        CHECK(fo.size == sizeof(nvf_fence_options) && fo.abort == 1 && fo.state_dir == NULL);
    }
    /* NULL handles are refused, never dereferenced. */
    CHECK(nvf_ns_get_info(NULL, NULL) == -NVF_ERRC_INVALID_ARGUMENT);
    CHECK(nvf_ns_report(NULL, NULL) == -NVF_ERRC_INVALID_ARGUMENT);
    CHECK(nvf_fence_new(NULL, NULL, NULL) == -NVF_ERRC_INVALID_ARGUMENT);
    CHECK(nvf_fence_takeover(NULL, 0, NULL) == -NVF_ERRC_INVALID_ARGUMENT);
    CHECK(nvf_fence_evict_node(NULL, 2, NVF_EVICT_ABSENT_FENCE, NULL) == -NVF_ERRC_INVALID_ARGUMENT);
    CHECK(nvf_fence_verify(NULL, NULL) == -NVF_ERRC_INVALID_ARGUMENT);
    CHECK(nvf_fence_set_cptpl(NULL, NVF_CPTPL_SET) == -NVF_ERRC_INVALID_ARGUMENT);
    CHECK(NVF_CPTPL_NO_CHANGE == 0 && NVF_CPTPL_CLEAR == 2 && NVF_CPTPL_SET == 3); /* the CPTPL field values */
    CHECK(nvf_writer_queue_write(NULL, 0, NULL, 0, 0) == -NVF_ERRC_INVALID_ARGUMENT);
    CHECK(nvf_writer_submit(NULL) == -NVF_ERRC_INVALID_ARGUMENT);
    CHECK(nvf_writer_reap(NULL, NULL, 0, 0) == -NVF_ERRC_INVALID_ARGUMENT);
    CHECK(nvf_writer_fenced(NULL) == 0);
    CHECK(nvf_writer_event_fd(NULL) == -NVF_ERRC_INVALID_ARGUMENT);
    nvf_ns_close(NULL);
    nvf_fence_free(NULL);
    nvf_writer_close(NULL);
    nvf_resv_status_free(NULL);
    unlink(path);
}

int main(void) {
    char dir[] = "/tmp/nvf-capi-XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    test_version();
    test_errors();
    test_keys();
    test_open_errors(dir);
    rmdir(dir);
    printf("capi_test: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
