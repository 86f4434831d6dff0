/*
 * nvlab-agent: the guest half of the nvfence QEMU lab.
 *
 * Runs inside a lab VM (as PID 1, exec'd by /init once the role setup is
 * done) and executes shell commands for the Python side over a virtio-serial
 * port named "org.nvfence.agent".
 *
 * Wire format (all integers big-endian):
 *   frame    = u32 length, payload[length]
 *   payload  = u8 type, body
 *   'Y' READY    (agent -> host): u32 n, text[n]  (contents of the ready file)
 *   'Q' REQUEST  (host -> agent): u32 id, u32 timeout_ms, u32 nenv,
 *                                 nenv x (u32 n, "KEY=VALUE"[n]), u32 n, cmd[n]
 *   'A' ANSWER   (agent -> host): u32 id, u8 how, i32 code, u8 flags,
 *                                 u32 duration_ms, u32 n, stdout[n],
 *                                 u32 n, stderr[n]
 *       how: 0 exited (code = exit status), 1 killed by signal (code = signo),
 *            2 timed out (process group got SIGKILL; code = -1),
 *            3 could not start (code = errno, stderr = reason)
 *       flags: bit0 stdout truncated, bit1 stderr truncated
 *   'E' ERROR    (agent -> host): u32 n, text[n]   (malformed request)
 *
 * Every request runs `/bin/sh -c cmd` in its own process group with stdin
 * from /dev/null; requests run concurrently; answers are written by this
 * single-threaded parent, one frame at a time.  Output is captured up to
 * CAP bytes per stream (the rest is read and dropped, and flagged).  When a
 * request's timeout expires its process group is killed and the answer is
 * sent at once with what was captured (a process stuck in uninterruptible
 * I/O is reaped later, silently).  When the command's shell exits the
 * answer is sent with everything already written to the pipes; output that
 * background children write afterwards is not collected (redirect it).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PORT_NAME "org.nvfence.agent"
#define CAP (4u << 20)            /* bytes kept per stream */
#define MAX_JOBS 64
#define MAX_REQ (1u << 20)        /* largest accepted request frame */
#define MAX_SKIP (64u << 20)      /* larger length prefixes mean desync */
#define PORT_WAIT_MS 20000

struct buf {
	char *p;
	size_t n, cap;
	int trunc;
};

struct job {
	int used;
	uint32_t id;
	pid_t pid;
	int fd[2];               /* stdout, stderr read ends; -1 when closed */
	struct buf out[2];
	int64_t start_ms, deadline_ms;
	int answered;            /* answer sent; only reaping left */
	int exited;
	int status;
};

static struct job jobs[MAX_JOBS];
static int port = -1;
static int sigpipe_fd[2];
static const char *ready_file;

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logmsg(const char *fmt, ...)
{
	va_list ap;
	char line[512];
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	/* /dev/console is our stdout/stderr (inherited from /init). */
	dprintf(2, "nvlab-agent: %s\n", line);
}

static void put32(char *p, uint32_t v)
{
	p[0] = (char)(v >> 24); p[1] = (char)(v >> 16);
	p[2] = (char)(v >> 8);  p[3] = (char)v;
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static void write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR || errno == EAGAIN) {
				if (errno == EAGAIN) {
					struct pollfd pf = { .fd = fd, .events = POLLOUT };
					poll(&pf, 1, 1000);
				}
				continue;
			}
			logmsg("write to port failed: %s", strerror(errno));
			return;
		}
		p += w;
		n -= (size_t)w;
	}
}

/* A frame is built in one buffer so it is written with as few calls as possible. */
struct frame {
	char *p;
	size_t n, cap;
};

static void fr_put(struct frame *f, const void *src, size_t n)
{
	if (f->n + n > f->cap) {
		size_t c = f->cap ? f->cap : 256;
		while (c < f->n + n)
			c *= 2;
		char *np = realloc(f->p, c);
		if (!np) {
			logmsg("out of memory building a frame");
			abort();
		}
		f->p = np;
		f->cap = c;
	}
	memcpy(f->p + f->n, src, n);
	f->n += n;
}

static void fr_u8(struct frame *f, uint8_t v) { fr_put(f, &v, 1); }
static void fr_u32(struct frame *f, uint32_t v) { char b[4]; put32(b, v); fr_put(f, b, 4); }
static void fr_bytes(struct frame *f, const char *p, size_t n) { fr_u32(f, (uint32_t)n); fr_put(f, p, n); }

static void fr_begin(struct frame *f, char type)
{
	f->n = 0;
	fr_u32(f, 0);
	fr_u8(f, (uint8_t)type);
}

static void fr_send(struct frame *f)
{
	put32(f->p, (uint32_t)(f->n - 4));
	write_all(port, f->p, f->n);
	free(f->p);
	f->p = NULL;
	f->n = f->cap = 0;
}

static void send_text(char type, const char *text, size_t n)
{
	struct frame f = { 0 };
	fr_begin(&f, type);
	fr_bytes(&f, text, n);
	fr_send(&f);
}

static void send_ready(void)
{
	char text[65536];
	size_t n = 0;
	int fd = ready_file ? open(ready_file, O_RDONLY | O_CLOEXEC) : -1;
	if (fd >= 0) {
		ssize_t r;
		while (n < sizeof text && (r = read(fd, text + n, sizeof text - n)) > 0)
			n += (size_t)r;
		close(fd);
	} else {
		n = (size_t)snprintf(text, sizeof text, "status=error\nerror=no ready file %s\n",
				     ready_file ? ready_file : "(none)");
	}
	/* Blocks until the host side has the port open: that is the point. */
	send_text('Y', text, n);
}

static void buf_add(struct buf *b, const char *p, size_t n)
{
	if (b->n + n > CAP) {
		b->trunc = 1;
		n = CAP - b->n;
	}
	if (n == 0)
		return;
	if (b->n + n > b->cap) {
		size_t c = b->cap ? b->cap : 4096;
		while (c < b->n + n)
			c *= 2;
		if (c > CAP)
			c = CAP;
		char *np = realloc(b->p, c);
		if (!np) {
			b->trunc = 1;
			return;
		}
		b->p = np;
		b->cap = c;
	}
	memcpy(b->p + b->n, p, n);
	b->n += n;
}

/* Read what is available on one of a job's pipes; returns 0 at EOF/error. */
static int job_read(struct job *j, int k)
{
	char tmp[65536];
	for (;;) {
		ssize_t r = read(j->fd[k], tmp, sizeof tmp);
		if (r > 0) {
			buf_add(&j->out[k], tmp, (size_t)r);
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return 1;
		close(j->fd[k]);
		j->fd[k] = -1;
		return 0;
	}
}

static void job_free(struct job *j)
{
	for (int k = 0; k < 2; k++) {
		if (j->fd[k] >= 0)
			close(j->fd[k]);
		j->fd[k] = -1;
		free(j->out[k].p);
		memset(&j->out[k], 0, sizeof j->out[k]);
	}
	j->used = 0;
}

static void answer(uint32_t id, uint8_t how, int32_t code, struct buf *o, struct buf *e,
		   int64_t start)
{
	struct frame f = { 0 };
	uint8_t flags = (uint8_t)((o && o->trunc ? 1 : 0) | (e && e->trunc ? 2 : 0));
	fr_begin(&f, 'A');
	fr_u32(&f, id);
	fr_u8(&f, how);
	fr_u32(&f, (uint32_t)code);
	fr_u8(&f, flags);
	fr_u32(&f, (uint32_t)(now_ms() - start));
	fr_bytes(&f, o ? o->p : "", o ? o->n : 0);
	fr_bytes(&f, e ? e->p : "", e ? e->n : 0);
	fr_send(&f);
}

static void answer_error(uint32_t id, int err, const char *what)
{
	struct buf e = { 0 };
	char msg[256];
	int n = snprintf(msg, sizeof msg, "nvlab-agent: %s: %s\n", what, strerror(err));
	buf_add(&e, msg, (size_t)n);
	answer(id, 3, err, NULL, &e, now_ms());
	free(e.p);
}

static void job_finish(struct job *j)
{
	/* The shell is gone: collect what it left in the pipes, then answer. */
	for (int k = 0; k < 2; k++)
		if (j->fd[k] >= 0)
			job_read(j, k);
	if (!j->answered) {
		uint8_t how;
		int32_t code;
		if (WIFEXITED(j->status)) {
			how = 0;
			code = WEXITSTATUS(j->status);
		} else {
			how = 1;
			code = WTERMSIG(j->status);
		}
		answer(j->id, how, code, &j->out[0], &j->out[1], j->start_ms);
	}
	job_free(j);
}

static void start_job(uint32_t id, uint32_t timeout_ms, char **env, uint32_t nenv, char *cmd)
{
	struct job *j = NULL;
	for (int i = 0; i < MAX_JOBS; i++)
		if (!jobs[i].used) {
			j = &jobs[i];
			break;
		}
	if (!j) {
		answer_error(id, EAGAIN, "too many concurrent requests");
		return;
	}
	int po[2], pe[2];
	if (pipe2(po, O_CLOEXEC) < 0) {
		answer_error(id, errno, "pipe");
		return;
	}
	if (pipe2(pe, O_CLOEXEC) < 0) {
		int e = errno;
		close(po[0]); close(po[1]);
		answer_error(id, e, "pipe");
		return;
	}
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(po[0]); close(po[1]); close(pe[0]); close(pe[1]);
		answer_error(id, e, "fork");
		return;
	}
	if (pid == 0) {
		sigset_t all;
		sigemptyset(&all);
		sigprocmask(SIG_SETMASK, &all, NULL);
		signal(SIGPIPE, SIG_DFL);
		signal(SIGCHLD, SIG_DFL);
		setpgid(0, 0);
		int nul = open("/dev/null", O_RDONLY);
		if (nul >= 0) {
			dup2(nul, 0);
			if (nul > 2)
				close(nul);
		}
		dup2(po[1], 1);
		dup2(pe[1], 2);
		for (uint32_t i = 0; i < nenv; i++)
			putenv(env[i]);
		if (chdir("/root") < 0 && chdir("/") < 0) {
			/* nothing sensible to do */
		}
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		dprintf(2, "nvlab-agent: exec /bin/sh: %s\n", strerror(errno));
		_exit(127);
	}
	setpgid(pid, pid); /* both sides, so a kill right away hits the group */
	close(po[1]);
	close(pe[1]);
	fcntl(po[0], F_SETFL, O_NONBLOCK);
	fcntl(pe[0], F_SETFL, O_NONBLOCK);
	memset(j, 0, sizeof *j);
	j->used = 1;
	j->id = id;
	j->pid = pid;
	j->fd[0] = po[0];
	j->fd[1] = pe[0];
	j->start_ms = now_ms();
	j->deadline_ms = timeout_ms ? j->start_ms + timeout_ms : 0;
}

/* Parse one request payload (type byte already checked). */
static void handle_request(const unsigned char *p, size_t n)
{
	size_t off = 0;
	char err[128];
	char *env[256];
	uint32_t nenv = 0, got = 0;
	char *cmd = NULL;
#define NEED(k) do { if (off + (k) > n) { snprintf(err, sizeof err, "truncated request at %zu", off); goto bad; } } while (0)
	NEED(12);
	uint32_t id = get32(p + off); off += 4;
	uint32_t timeout_ms = get32(p + off); off += 4;
	nenv = get32(p + off); off += 4;
	if (nenv > 256) {
		snprintf(err, sizeof err, "too many env entries (%u)", nenv);
		nenv = 0;
		goto bad;
	}
	for (got = 0; got < nenv; got++) {
		NEED(4);
		uint32_t l = get32(p + off); off += 4;
		NEED(l);
		env[got] = strndup((const char *)p + off, l);
		off += l;
	}
	NEED(4);
	uint32_t l = get32(p + off); off += 4;
	NEED(l);
	cmd = strndup((const char *)p + off, l);
	start_job(id, timeout_ms, env, nenv, cmd);
	goto out;
bad:
	logmsg("bad request: %s", err);
	send_text('E', err, strlen(err));
out:
	for (uint32_t i = 0; i < got && i < nenv; i++)
		free(env[i]);
	free(cmd);
#undef NEED
}

static void on_sigchld(int sig)
{
	(void)sig;
	int saved = errno;
	char c = 0;
	if (write(sigpipe_fd[1], &c, 1) < 0) {
		/* pipe full: a wakeup is already pending */
	}
	errno = saved;
}

static void reap(void)
{
	int status;
	pid_t pid;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		for (int i = 0; i < MAX_JOBS; i++) {
			if (jobs[i].used && jobs[i].pid == pid) {
				jobs[i].exited = 1;
				jobs[i].status = status;
				job_finish(&jobs[i]);
				break;
			}
		}
		/* Anything else was an orphan re-parented to us (we are PID 1). */
	}
}

static int find_port(char *path, size_t len)
{
	DIR *d = opendir("/sys/class/virtio-ports");
	if (!d)
		return -1;
	struct dirent *e;
	int found = -1;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char np[512], name[128] = { 0 };
		snprintf(np, sizeof np, "/sys/class/virtio-ports/%s/name", e->d_name);
		int fd = open(np, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t r = read(fd, name, sizeof name - 1);
		close(fd);
		if (r <= 0)
			continue;
		name[strcspn(name, "\n")] = 0;
		if (strcmp(name, PORT_NAME) == 0) {
			snprintf(path, len, "/dev/%s", e->d_name);
			found = 0;
			break;
		}
	}
	closedir(d);
	return found;
}

int main(int argc, char **argv)
{
	ready_file = argc > 1 ? argv[1] : "/run/nvlab/ready";
	signal(SIGPIPE, SIG_IGN);
	if (pipe2(sigpipe_fd, O_CLOEXEC | O_NONBLOCK) < 0) {
		logmsg("pipe: %s", strerror(errno));
		return 1;
	}
	struct sigaction sa = { 0 };
	sa.sa_handler = on_sigchld;
	sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa, NULL);

	/* The port device shows up asynchronously with virtio probing: wait, bounded. */
	char path[512];
	int64_t until = now_ms() + PORT_WAIT_MS;
	for (;;) {
		if (find_port(path, sizeof path) == 0) {
			port = open(path, O_RDWR | O_CLOEXEC);
			if (port >= 0)
				break;
		}
		if (now_ms() > until) {
			logmsg("no virtio port named %s after %d ms", PORT_NAME, PORT_WAIT_MS);
			/* PID 1 must not exit: park forever so the console stays readable. */
			for (;;)
				pause();
		}
		struct timespec ts = { 0, 20 * 1000000 };
		nanosleep(&ts, NULL);
	}
	logmsg("port %s open, sending READY", path);
	send_ready();

	unsigned char *in = malloc(MAX_REQ + 4);
	size_t inn = 0;
	uint32_t skip = 0; /* bytes of an oversized frame still to drop */
	if (!in) {
		logmsg("out of memory");
		for (;;)
			pause();
	}

	for (;;) {
		struct pollfd pf[2 + 2 * MAX_JOBS];
		struct job *owner[2 + 2 * MAX_JOBS];
		int owner_k[2 + 2 * MAX_JOBS];
		int np = 0;
		pf[np].fd = port; pf[np].events = POLLIN; owner[np++] = NULL;
		pf[np].fd = sigpipe_fd[0]; pf[np].events = POLLIN; owner[np++] = NULL;
		int64_t next = -1, t = now_ms();
		for (int i = 0; i < MAX_JOBS; i++) {
			struct job *j = &jobs[i];
			if (!j->used)
				continue;
			for (int k = 0; k < 2; k++) {
				if (j->fd[k] < 0)
					continue;
				pf[np].fd = j->fd[k];
				pf[np].events = POLLIN;
				owner_k[np] = k;
				owner[np++] = j;
			}
			if (!j->answered && j->deadline_ms) {
				int64_t left = j->deadline_ms - t;
				if (left < 0)
					left = 0;
				if (next < 0 || left < next)
					next = left;
			}
		}
		int r = poll(pf, (nfds_t)np, next < 0 ? -1 : (int)next);
		if (r < 0 && errno != EINTR) {
			logmsg("poll: %s", strerror(errno));
			continue;
		}
		if (r > 0 && (pf[1].revents & POLLIN)) {
			char drain[64];
			while (read(sigpipe_fd[0], drain, sizeof drain) > 0)
				;
		}
		for (int i = 2; r > 0 && i < np; i++)
			if (pf[i].revents && owner[i]->fd[owner_k[i]] >= 0)
				job_read(owner[i], owner_k[i]);
		reap();

		/* Timeouts: kill the group, answer now with what was captured. */
		t = now_ms();
		for (int i = 0; i < MAX_JOBS; i++) {
			struct job *j = &jobs[i];
			if (j->used && !j->answered && j->deadline_ms && t >= j->deadline_ms) {
				kill(-j->pid, SIGKILL);
				for (int k = 0; k < 2; k++)
					if (j->fd[k] >= 0)
						job_read(j, k);
				answer(j->id, 2, -1, &j->out[0], &j->out[1], j->start_ms);
				j->answered = 1;
				for (int k = 0; k < 2; k++) {
					if (j->fd[k] >= 0)
						close(j->fd[k]);
					j->fd[k] = -1;
				}
			}
		}

		if (r > 0 && pf[0].revents) {
			ssize_t got = read(port, in + inn, MAX_REQ + 4 - inn);
			if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
				/* Host side closed the port. A write blocks until it is open
				 * again, so announce ourselves: that is our wait. */
				logmsg("host side closed the port; waiting for it to reopen");
				inn = 0;
				skip = 0;
				send_ready();
				continue;
			}
			if (got > 0)
				inn += (size_t)got;
			for (;;) {
				if (skip) {
					size_t d = inn < skip ? inn : skip;
					memmove(in, in + d, inn - d);
					inn -= d;
					skip -= (uint32_t)d;
					if (skip)
						break;
				}
				if (inn < 4)
					break;
				uint32_t len = get32(in);
				if (len > MAX_REQ || len == 0) {
					char e[96];
					int n = snprintf(e, sizeof e, "frame of %u bytes rejected", len);
					logmsg("%s", e);
					send_text('E', e, (size_t)n);
					if (len > MAX_SKIP) {
						/* Cannot be a real frame: drop everything buffered. */
						inn = 0;
						break;
					}
					memmove(in, in + 4, inn - 4);
					inn -= 4;
					skip = len;
					continue;
				}
				if (inn < 4 + len)
					break;
				if (in[4] == 'Q')
					handle_request(in + 5, len - 1);
				else {
					char e[64];
					int n = snprintf(e, sizeof e, "unknown frame type 0x%02x", in[4]);
					send_text('E', e, (size_t)n);
				}
				memmove(in, in + 4 + len, inn - 4 - len);
				inn -= 4 + len;
			}
		}
	}
}
