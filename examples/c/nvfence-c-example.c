/* SPDX-License-Identifier: MIT */
/* nvfence-c-example: the C API (nvfence/nvfence.h) used from C11, built
 * out of tree against the installed package:
 *
 *   cc -std=c11 nvfence-c-example.c $(pkg-config --cflags --libs nvfence)
 *
 * Commands (exit codes are nvfence's: 0 ok, 2 usage, 3 fenced/conflict,
 * 4 unsupported, 5 permission, 6 lost race, 1 other):
 *   version                      library version
 *   info DEV                     identity, capabilities and the reservation
 *   takeover DEV NODE [VICTIM]   take the reservation (naming the victim: a
 *                                compare-and-swap), print the new key
 *   write DEV LBA [COUNT]        write COUNT blocks through the fenced writer
 *                                under this host's registered epoch; prints
 *                                one line per completion: ok, fenced, error
 *   evict-node DEV NODE VICTIM_NODE
 *                                evict every key of node VICTIM_NODE (as
 *                                fence_nvfence's 'off'), verified
 *   release DEV NODE / leave DEV NODE
 *   agent OP TARGET [VICTIM]     ask the host agent nvfenced of TARGET (a
 *                                volume name or socket path): OP is status,
 *                                takeover, handoff or rejoin; prints its
 *                                answer; exits with the agent's exit code
 */
#define _POSIX_C_SOURCE 200809L
#include <nvfence/nvfence.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, int rc) {
    fprintf(stderr, "nvfence-c-example: %s: %s\n", what, nvf_strerror(rc));
    return nvf_exit_code(rc);
}

static int usage(void) {
    fprintf(stderr, "usage: nvfence-c-example version | info DEV | takeover DEV NODE [VICTIM] |\n"
                    "       evict-node DEV NODE VICTIM_NODE | write DEV LBA [COUNT] | release DEV NODE |\n"
                    "       leave DEV NODE | agent status|takeover|handoff|rejoin TARGET [VICTIM]\n");
    return 2;
}

static int parse_u64(const char *s, unsigned long long max, unsigned long long *out) {
    char *end = NULL;
    unsigned long long v;
    if (!s || !*s || *s == '-') return -1;
    v = strtoull(s, &end, 10);
    if (*end || v > max) return -1;
    *out = v;
    return 0;
}

static void print_status(const nvf_resv_status *st) {
    char key[32];
    size_t i;
    printf("generation %u type %d holder ", (unsigned)st->generation, (int)st->type);
    if (st->has_holder) {
        nvf_key_format(st->holder_key, key, sizeof key);
        printf("%s\n", key);
    } else {
        printf("none\n");
    }
    for (i = 0; i < st->count; ++i) {
        const nvf_registrant *r = &st->registrants[i];
        nvf_key_format(r->key, key, sizeof key);
        printf("registrant %s%s%s", key, r->holder ? " holder" : "", r->is_self ? " self" : "");
        if (r->ours) printf(" tag %u node %u epoch %u", r->fields.tag, r->fields.node, (unsigned)r->fields.epoch);
        else printf(" foreign");
        printf("\n");
    }
}

static int cmd_info(const char *dev) {
    nvf_ns *ns = NULL;
    nvf_ns_info info;
    nvf_resv_status st;
    char why[256];
    int rc = nvf_ns_open(dev, 5000, &ns);
    if (rc) return fail(dev, rc);
    nvf_ns_get_info(ns, &info);
    printf("model %s\nserial %s\nvolume %s\nnsid %u\nlba_bytes %u\nsize_blocks %llu\nreservations %u\nresv_types 0x%02x\n",
           info.model, info.serial, info.volume, (unsigned)info.nsid, (unsigned)info.lba_bytes,
           (unsigned long long)info.size_blocks, info.reservations, info.resv_types);
    rc = nvf_ns_require_reservations(ns, why, sizeof why);
    if (rc) {
        fprintf(stderr, "nvfence-c-example: %s: %s\n", dev, why);
        nvf_ns_close(ns);
        return nvf_exit_code(rc);
    }
    rc = nvf_ns_report(ns, &st);
    if (rc == 0) {
        print_status(&st);
        nvf_resv_status_free(&st);
    }
    nvf_ns_close(ns);
    return rc ? fail("report", rc) : 0;
}

/* Opens DEV and a fence for NODE, runs op, prints the outcome. @p arg:
 * takeover's victim key, evict-node's victim node. */
static int cmd_fence(const char *dev, const char *node_s, const char *op, const char *arg) {
    nvf_ns *ns = NULL;
    nvf_fence *f = NULL;
    nvf_fence_options fo = NVF_FENCE_OPTIONS_INIT;
    nvf_outcome o;
    unsigned long long node, victim_node = 0;
    uint64_t victim = 0;
    char key[32];
    int rc;
    if (parse_u64(node_s, 255, &node) || node == 0) return usage();
    if (strcmp(op, "evict-node") == 0) {
        if (parse_u64(arg, 255, &victim_node) || victim_node == 0) return usage();
    } else if (arg && nvf_key_parse(arg, &victim)) {
        fprintf(stderr, "nvfence-c-example: bad victim key '%s'\n", arg);
        return 2;
    }
    fo.node = (uint8_t)node;
    rc = nvf_ns_open(dev, 5000, &ns);
    if (rc) return fail(dev, rc);
    rc = nvf_fence_new(ns, &fo, &f);
    if (rc) {
        nvf_ns_close(ns);
        return fail(dev, rc);
    }
    if (strcmp(op, "takeover") == 0) rc = nvf_fence_takeover(f, victim, &o);
    else if (strcmp(op, "evict-node") == 0)
        rc = nvf_fence_evict_node(f, (uint8_t)victim_node, NVF_EVICT_ABSENT_FENCE, &o);
    else if (strcmp(op, "release") == 0) rc = nvf_fence_release(f, &o);
    else rc = nvf_fence_leave(f, &o);
    if (rc == 0) {
        nvf_key_format(o.key, key, sizeof key);
        printf("%s: changed %u key %s", op, o.changed, o.key ? key : "none");
        nvf_key_format(o.holder_after, key, sizeof key);
        printf(" holder %s removed %zu generation %u\n", o.holder_after ? key : "none", o.removed_count,
               (unsigned)o.generation_after);
    } else {
        nvf_resv_status st;
        if (nvf_fence_verify(f, &st) == 0) {
            print_status(&st);
            nvf_resv_status_free(&st);
        }
    }
    nvf_fence_free(f);
    nvf_ns_close(ns);
    return rc ? fail(op, rc) : 0;
}

/* Asks the agent of TARGET; prints its answer. */
static int cmd_agent(const char *op_s, const char *target, const char *victim_s) {
    static const char *const ops[] = {"status", "takeover", "handoff", "rejoin"};
    nvf_agent_reply r = NVF_AGENT_REPLY_INIT;
    uint64_t victim = 0;
    char key[32], holder[32];
    int op = 0, rc, i;
    for (i = 0; i < 4; ++i)
        if (strcmp(op_s, ops[i]) == 0) op = NVF_AGENT_STATUS + i;
    if (op == 0 || (victim_s && (op != NVF_AGENT_TAKEOVER || nvf_key_parse(victim_s, &victim)))) return usage();
    rc = nvf_agent_request(target, op, victim, 60000, &r);
    if (rc) return fail(target, rc);
    nvf_key_format(r.key, key, sizeof key);
    nvf_key_format(r.holder, holder, sizeof holder);
    printf("agent: exit %d state %d changed %u key %s holder %s volume %s\nmessage: %s\n", r.exit_code, r.state,
           (unsigned)r.changed, r.key ? key : "none", r.holder ? holder : "none", r.volume, r.message);
    return r.exit_code;
}

static int cmd_write(const char *dev, const char *lba_s, const char *count_s) {
    nvf_ns *ns = NULL;
    nvf_resv_status st;
    nvf_writer *w = NULL;
    nvf_writer_options wo = NVF_WRITER_OPTIONS_INIT;
    unsigned long long lba, count = 1, i;
    uint32_t bs;
    unsigned char *buf;
    size_t k;
    int rc, fenced = 0, errors = 0;
    if (parse_u64(lba_s, 1ull << 40, &lba) || (count_s && (parse_u64(count_s, 32, &count) || count == 0)))
        return usage();
    /* The writer stamps the epoch of this host's own registration. */
    rc = nvf_ns_open(dev, 5000, &ns);
    if (rc) return fail(dev, rc);
    rc = nvf_ns_report(ns, &st);
    if (rc) {
        nvf_ns_close(ns);
        return fail("report", rc);
    }
    for (k = 0; k < st.count; ++k)
        if (st.registrants[k].is_self && st.registrants[k].ours) wo.epoch = st.registrants[k].fields.epoch;
    nvf_resv_status_free(&st);
    nvf_ns_close(ns);
    wo.queue_depth = 32;
    wo.timeout_ms = 30000;
    rc = nvf_writer_open(dev, &wo, &w);
    if (rc) return fail("writer", rc);
    bs = nvf_writer_block_bytes(w);
    buf = aligned_alloc(4096, (size_t)count * ((bs + 4095) / 4096 * 4096));
    if (!buf) {
        nvf_writer_close(w);
        return fail("buffer", -NVF_ERRC_NOMEM);
    }
    for (i = 0; i < count; ++i) {
        unsigned char *b = buf + i * bs;
        memset(b, 0, bs);
        snprintf((char *)b, bs, "nvfence-c-example epoch %llu lba %llu", (unsigned long long)wo.epoch, lba + i);
        rc = nvf_writer_queue_write(w, lba + i, b, bs, i);
        if (rc) {
            free(buf);
            nvf_writer_close(w);
            return fail("queue", rc);
        }
    }
    rc = nvf_writer_submit(w);
    if (rc < 0 && rc != -NVF_ERRC_FENCED) {
        /* Nothing reached the device: the queued I/Os are reaped below. */
        fprintf(stderr, "nvfence-c-example: submit: %s\n", nvf_strerror(rc));
    }
    for (i = 0; i < count;) {
        nvf_completion c[32];
        int n = nvf_writer_reap(w, c, 32, 1), j;
        if (n < 0) {
            free(buf);
            nvf_writer_close(w);
            return fail("reap", n);
        }
        for (j = 0; j < n; ++j, ++i) {
            const char *what = c[j].status == NVF_IO_OK ? "ok" : c[j].status == NVF_IO_FENCED ? "fenced" : "error";
            printf("write lba %llu epoch %llu: %s%s%s\n", lba + c[j].user_data, (unsigned long long)wo.epoch, what,
                   c[j].error ? " " : "", c[j].error ? nvf_strerror(c[j].error) : "");
            fenced += c[j].status == NVF_IO_FENCED;
            errors += c[j].status == NVF_IO_ERROR;
        }
    }
    printf("writer latched %d\n", nvf_writer_fenced(w));
    nvf_writer_close(w);
    free(buf);
    return fenced ? 3 : errors ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    if (strcmp(argv[1], "version") == 0) {
        printf("libnvfence %s (header %s)\n", nvf_version(), NVF_VERSION_STRING);
        return strcmp(nvf_version(), NVF_VERSION_STRING) == 0 ? 0 : 1;
    }
    if (strcmp(argv[1], "info") == 0 && argc == 3) return cmd_info(argv[2]);
    if (strcmp(argv[1], "takeover") == 0 && (argc == 4 || argc == 5))
        return cmd_fence(argv[2], argv[3], "takeover", argc == 5 ? argv[4] : NULL);
    if (strcmp(argv[1], "agent") == 0 && (argc == 4 || argc == 5))
        return cmd_agent(argv[2], argv[3], argc == 5 ? argv[4] : NULL);
    if (strcmp(argv[1], "evict-node") == 0 && argc == 5) return cmd_fence(argv[2], argv[3], argv[1], argv[4]);
    if ((strcmp(argv[1], "release") == 0 || strcmp(argv[1], "leave") == 0) && argc == 4)
        return cmd_fence(argv[2], argv[3], argv[1], NULL);
    if (strcmp(argv[1], "write") == 0 && (argc == 4 || argc == 5))
        return cmd_write(argv[2], argv[3], argc == 5 ? argv[4] : NULL);
    return usage();
}
