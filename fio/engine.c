/*
 * zonefold: a fio external ioengine that is a client of the zonefold
 * daemon (docs/protocol.md), protocol version 2: requests and replies
 * travel in a submission and a completion ring in the shared region.
 *
 * Each job (process or thread) opens its own connection; fio's setup
 * of the files (zf_setup, zf_prepopulate_file) shares one per thread,
 * kept until the jobs start (zf_setup_take), and lays out files that
 * need no data many at a time (zf_lay_out_ahead). fio's I/O
 * buffers live in the connection's shared-memory region (.iomem_alloc),
 * so a request only names an offset in it: the daemon copies a write
 * from fio's buffer straight into its cache. .queue encodes a request,
 * .commit puts every queued request on the submission ring and publishes
 * them with one release store (ringing the daemon's doorbell, one byte
 * on the socket, only if the daemon said it sleeps), .getevents takes
 * what the daemon has published on the completion ring, spinning and
 * yielding the CPU a little if the daemon has lately been quick and the
 * job has a CPU to spare (zf_busy_waits), then
 * sleeping on a futex in the region that the daemon wakes when it
 * publishes. New I/O may be queued while earlier I/O is unreaped.
 *
 * ZONEFOLD_FIO_STATS=FILE: each job appends a line about its waits for
 * replies to FILE at its end (zf_write_stats).
 *
 * sync=1 (or dsync) means what O_SYNC means to fio's own engines: a
 * write is durable when fio sees it complete. The daemon acknowledges a
 * write once its cache holds it, so the engine follows each write with
 * an fsync of its file and completes the write only when that returns.
 *
 * fio's filename is the zonefold file name, cleaned like a path
 * (zf_clean_name: "d//f" and "./d/f" are "d/f"), created if missing,
 * unless fio --readonly or allow_file_create=0 (zf_open_file). File
 * sizes follow fio's options as for regular files (zf_setup): size=,
 * nrfiles=, filesize= (a size or a range), or the daemon's size of an
 * existing file when none is given. Before a job runs, a file shorter
 * than its range is laid out as fio lays out a regular file
 * (zf_prepopulate_file): with data for a job that reads or writes with
 * overwrite=1, emptied (as fio unlinks it) and grown as fallocate= says
 * for other jobs that write; a Ctrl-C meanwhile removes it. With
 * create_on_open=1 nothing is laid out, and a read at a file's end
 * fails with EIO, as fio's psync fails it (complete). pre_read=1 reads
 * each file's range through the daemon before the timed run
 * (zf_pre_read). create_only=1 lays each file out and runs nothing
 * else, as with fio's own engines. A percentage offset= or
 * offset_increment= takes its share of the file's size as on a regular
 * file (zf_setup).
 *
 * Build: make fio-engine (fio/build.sh), against the installed fio's
 * source. Use: fio --ioengine=external:/abs/zonefold-engine.so --sock=PATH
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fio.h"
#include "optgroup.h"

/* Protocol constants: server/proto.go and server/ring.go are the reference. */
#define ZF_MAGIC 0x444c465aU
#define ZF_VERSION 2
#define ZF_HELLO_SIZE 32
#define ZF_HELLO_REPLY_SIZE 64
#define ZF_REQ_SIZE 48
#define ZF_REP_SIZE 32
#define ZF_MAX_RING 4096
#define ZF_MAX_REGION (1ULL << 30) /* the hello's region, at most (server.MaxRegion) */

/* Ring control words, from the start of the ring area. */
#define ZF_SQ_HEAD 0
#define ZF_SQ_TAIL 64
#define ZF_SQ_FLAGS 128
#define ZF_CQ_HEAD 192
#define ZF_CQ_TAIL 256
#define ZF_CQ_FLAGS 320
#define ZF_CQ_WANT 384
#define ZF_SQ_NEED_WAKEUP 1U
#define ZF_CQ_WAITING 1U
#define ZF_CQ_WANTS 2U /* with WAITING: wake me when cq_tail reaches *cq_want_p */

enum {
	ZF_OP_OPEN = 2,
	ZF_OP_CLOSE = 3,
	ZF_OP_READ = 4,
	ZF_OP_WRITE = 5,
	ZF_OP_FSYNC = 6,
	ZF_OP_TRUNCATE = 7,
	ZF_OP_REMOVE = 8,
	ZF_OP_RENAME = 9,
	ZF_OP_STAT = 10,
};
#define ZF_OPEN_CREATE 1
#define ZF_OPEN_EXCL 4       /* with create: EEXIST if the file exists */
#define ZF_OPEN_DEFER_SYNC 8 /* with create: durable from the next fsync, as open(2)'s O_CREAT */
#define ZF_REMOVE_UNUSED 1   /* remove only a file no handle has open, else EBUSY */
#define ZF_TRUNCATE_GROW 1
/*
 * Names reserved for temporaries (server.TempPrefix): the daemon removes
 * such a file when the connection that created it ends, unless it was
 * renamed to an ordinary name first, and every one at its start.
 */
#define ZF_TEMP_PREFIX ".zonefold-tmp."

/* The tail of the data part holds names; fio's buffers are before it. */
#define ZF_CTL_BYTES 4096
/*
 * Tag of the one synchronous request (open, close, stat) a job may have
 * outstanding. An I/O request is tagged with its slot in the engine's
 * table of outstanding io_us and the slot's generation, which grows each
 * time the slot is taken: generation << 32 | (slot + 1) << 1, and the
 * fsync that follows a sync=1 write with that plus one. So a reply's tag
 * is checked against what is outstanding before it names an io_u, and a
 * stale or repeated reply, whose slot has since gone to another request,
 * names none.
 */
#define ZF_SYNC_TAG 1
#define ZF_TAG_SLOT_MASK 0x7fffffffULL
enum { ZF_SLOT_FREE, ZF_SLOT_IO, ZF_SLOT_FSYNC };
/*
 * Spinning for completions is worth it only when the daemon usually
 * answers within a few microseconds (a moving average of the waits
 * decides); past this, the job sleeps at once.
 */
#define ZF_SPIN_MAX_NS 30000
/*
 * Between the spin and the sleep, a wait yields the CPU (sched_yield)
 * for up to ZF_YIELD_NS, looking at the completion tail after each
 * yield, if its waits have lately ended within ZF_YIELD_GATE_NS. Where
 * fio's jobs and the daemon are more runnable tasks than there are CPUs,
 * a yield hands the CPU to one of them (often the daemon, which then
 * publishes what this job waits for) without what a futex sleep costs
 * both sides: the daemon's FUTEX_WAKE and the wakeup of a task asleep,
 * often on another CPU. Where nothing else is runnable, a yield returns
 * at once and this is a short spin. Yields that find a reply mostly
 * find it within 30 us (83-95% of them in cold 4k reads, hot 4k reads
 * and 4k-qd128 writes on null:); a yield phase that finds none costs the
 * job that long on a CPU and then the sleep anyway. At 100 us, cold 4k
 * reads at iodepth 32 (replies at the device's pace) yielded in 0.5-0.6
 * s of phases that ended asleep per run, where fio used 0.7 s of CPU.
 */
#define ZF_YIELD_NS 30000
#define ZF_YIELD_GATE_NS 1000000
/*
 * Spinning and yielding pay only where the waiting job has a CPU to
 * itself: a job that spins or yields stays runnable and takes its share
 * of the CPUs from the daemon and from the other jobs, all of which must
 * run for its reply to come. So a job waits busily (spin, then yield)
 * only if its group's jobs (those fio runs at once) leave a CPU for the
 * daemon: fewer jobs than the CPUs it may run on (zf_busy_waits). 16
 * jobs on 2 CPUs that did (fio 16x8k randwrite) spent most of both CPUs
 * in sched_yield while the daemon waited for a CPU; they went 1.7-2.3x
 * faster sleeping at once. One job (seq128k) went 1.3x faster spinning.
 */
/*
 * A setup connection lays out up to ZF_BATCH files at once (each step's
 * requests together: zf_lay_out_ahead); the names take ZF_NAME_ROOM
 * bytes each of its region.
 */
#define ZF_BATCH 64
#define ZF_NAME_ROOM 256
/* A sleep for completions checks every ZF_SLICE_MS that the daemon is there. */
#define ZF_SLICE_MS 100

struct zf_options {
	void *pad; /* fio requires a pointer-sized first member */
	char *sock;
};

static struct fio_option options[] = {
	{
		.name = "sock",
		.lname = "zonefold socket",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct zf_options, sock),
		.help = "Path of the zonefold daemon's Unix socket",
		.def = "/tmp/zonefold.sock",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{ .name = NULL },
};

struct zf_data {
	int fd;                    /* the socket: handshake and doorbells */
	uint8_t *mapped;           /* the shared region */
	size_t map_len;
	uint8_t *region;           /* its data and names part */
	size_t region_len;
	uint32_t max_inflight, max_io;

	/* The rings. Indices are free-running; entries is a power of two. */
	uint32_t entries, mask;
	uint32_t *sq_head_p, *sq_tail_p, *sq_flags_p, *cq_head_p, *cq_tail_p, *cq_flags_p, *cq_want_p;
	uint8_t *sqes, *cqes;
	uint32_t sq_tail;          /* published */
	uint32_t cq_head;          /* consumed */
	uint64_t gap_ns;           /* moving average of waits for completions */
	int busy_waits;            /* spin and yield before sleeping (zf_busy_waits) */
	int group_jobs, cpus;      /* what zf_busy_waits decided from */
	/* How waits for replies ended (ZONEFOLD_FIO_STATS): in the spin, in the yield phase, asleep. */
	unsigned long waits_spun, waits_yielded, waits_slept;

	uint8_t *sbuf;             /* encoded requests not yet committed */
	struct io_u **pending;     /* their io_us */
	unsigned int npending;
	unsigned int inflight;     /* published, reply not yet seen */

	struct io_u **done;        /* ring: replied, not yet handed to fio */
	unsigned int done_head, done_count, done_cap;
	struct io_u **events;      /* what the last getevents returned */

	/* Outstanding io_us by slot (the tag), done_cap of them. */
	struct io_u **slots;
	uint8_t *slot_state;       /* ZF_SLOT_* */
	uint32_t *slot_gen;        /* taken how many times: the tag's high half */
	uint32_t *free_slots;      /* a stack */
	unsigned int nfree;

	int durable_creates;       /* the daemon predates ZF_OPEN_DEFER_SYNC: every create flushes */
	int sync_writes;           /* sync=1: a write completes once its file is fsynced */
	uint8_t *fsbuf;            /* those fsyncs, encoded while reaping */

	int dead;                  /* the connection is gone: this errno fails every request */
	unsigned int eof_logged;   /* reads that found the file's end (complete) */
	unsigned int pre_read_next; /* pre_read=1: td->files index fio pre-reads next (zf_pre_read) */
	int sync_waiting;          /* a synchronous request is outstanding */
	uint32_t sync_status;
	uint64_t sync_val, sync_val2;

	/* A setup connection's batch of requests (zf_batch_run) and its results. */
	uint32_t ring_want;        /* ring entries to ask for, if not done_cap + 1 */
	unsigned int batch_n, batch_left;
	uint32_t batch_status[ZF_BATCH];
	uint64_t batch_val[ZF_BATCH], batch_val2[ZF_BATCH];
	/* Files of ahead_td laid out ahead (zf_lay_out_ahead), their index in td->files. */
	struct thread_data *ahead_td;
	unsigned int ahead_from, ahead_n;
	uint8_t ahead_done[ZF_BATCH];

	/* An idle setup connection (zf_setup_keep): whose, and the next. */
	struct zf_data *idle_next;
	char *idle_sock;
	pid_t idle_pid;
	pthread_t idle_tid;
};

static void put16(uint8_t *b, uint16_t v) { memcpy(b, &v, 2); }
static void put32(uint8_t *b, uint32_t v) { memcpy(b, &v, 4); }
static void put64(uint8_t *b, uint64_t v) { memcpy(b, &v, 8); }
static uint32_t get32(const uint8_t *b) { uint32_t v; memcpy(&v, b, 4); return v; }
static uint64_t get64(const uint8_t *b) { uint64_t v; memcpy(&v, b, 8); return v; }

/* The protocol is little endian, as is every machine fio runs this on. */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "zonefold engine: big-endian hosts are not supported"
#endif

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void encode_req(uint8_t *b, uint64_t tag, uint8_t op, uint8_t flags, uint32_t handle,
		       uint64_t off, uint64_t addr, uint32_t len)
{
	memset(b, 0, ZF_REQ_SIZE);
	put64(b + 0, tag);
	b[8] = op;
	b[9] = flags;
	put32(b + 12, handle);
	put64(b + 16, off);
	put64(b + 24, addr);
	put32(b + 32, len);
}

static const char *sock_path(struct thread_data *td)
{
	struct zf_options *o = td->eo;
	return o && o->sock ? o->sock : "/tmp/zonefold.sock";
}

static int zf_send(int fd, const void *buf, size_t len)
{
	for (;;) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
		if (n == (ssize_t) len)
			return 0;
		if (n < 0 && errno == EINTR)
			continue;
		return n < 0 ? -errno : -EIO;
	}
}

/*
 * rings_fit checks that the hello reply's rings fit in the region it
 * maps: the engine trusts no offset it has not checked.
 */
static int rings_fit(const uint8_t *rep, uint64_t region, uint64_t map)
{
	uint64_t ring = get64(rep + 32), e = get32(rep + 48);
	uint64_t sq = get32(rep + 52), cq = get32(rep + 56);

	if (e == 0 || (e & (e - 1)) || e > ZF_MAX_RING || get64(rep + 40) != map)
		return 0;
	if (region > ring || ring > map || ring % 64 || sq % 64 || cq % 64)
		return 0;
	if (sq < ZF_CQ_WANT + 4 || cq < ZF_CQ_WANT + 4)
		return 0;
	return ring + sq + e * ZF_REQ_SIZE <= map && ring + cq + e * ZF_REP_SIZE <= map;
}

/*
 * zf_connect connects to the daemon, maps a region of at least
 * data_bytes + ZF_CTL_BYTES for data and names, and rings of at least
 * zd->done_cap entries. On failure it logs why and returns -errno.
 */
/*
 * prefault reads a byte of each page of [from, len) of the mapping: the
 * names and the rings, which the job would otherwise first touch in its
 * first requests, inside fio's clock (fio fills its buffers, the part
 * before from, itself before it starts the clock). On a machine with
 * shadow page tables (the project's paravirtualised test machine) the
 * first access to each page of a mapping costs tens of microseconds,
 * however the page came to exist (docs/protocol.md, "The shared-memory
 * region").
 */
static void prefault(const uint8_t *mem, size_t from, size_t len, long page)
{
	size_t i;

	for (i = from - from % page; i < len; i += page)
		(void) *(volatile const uint8_t *) (mem + i);
}

static int zf_connect(struct thread_data *td, struct zf_data *zd, size_t data_bytes)
{
	const char *path = sock_path(td);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	uint8_t hello[ZF_HELLO_SIZE] = { 0 }, rep[ZF_HELLO_REPLY_SIZE + 1];
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = rep, .iov_len = sizeof(rep) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	size_t want = data_bytes + ZF_CTL_BYTES;
	long page = sysconf(_SC_PAGESIZE);
	int fd, memfd = -1, err;
	uint64_t region, map;
	uint8_t *ring;
	ssize_t n;
	void *mem;

	want = (want + page - 1) / page * page;
	if (strlen(path) >= sizeof(sa.sun_path)) {
		log_err("zonefold: socket path too long: %s\n", path);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
		err = -errno;
		log_err("zonefold: connect to %s: %s (is `zonefold serve` running?)\n", path, strerror(-err));
		close(fd);
		return err;
	}
	put32(hello, ZF_MAGIC);
	put16(hello + 4, ZF_VERSION);
	put64(hello + 8, want);
	/* Room for every io_u, fio's end-of-job fsync, and an open or close. */
	put32(hello + 16, zd->ring_want ? zd->ring_want :
			  zd->done_cap + 1 < ZF_MAX_RING ? zd->done_cap + 1 : ZF_MAX_RING);
	if ((err = zf_send(fd, hello, sizeof(hello))) < 0)
		goto fail;
	do
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		err = -errno;
		goto fail;
	}
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			memcpy(&memfd, CMSG_DATA(cm), sizeof(int));
	if (n < 32 || get32(rep) != ZF_MAGIC) {
		log_err("zonefold: %s: not a zonefold daemon (hello reply of %zd bytes)\n", path, n);
		err = -EPROTO;
		goto fail;
	}
	if (get32(rep + 8) != 0) {
		err = -(int) get32(rep + 8);
		if (err == -EPROTONOSUPPORT)
			log_err("zonefold: the daemon speaks protocol version %u, this engine %u: "
				"rebuild the engine (make fio-engine) from the daemon's source\n",
				(unsigned) rep[4] | (unsigned) rep[5] << 8, ZF_VERSION);
		else if (err == -ENOMEM)
			log_err("zonefold: daemon refused the connection: %s (the daemon's "
				"--max-shared-memory has no room for this job's region: lower iodepth "
				"or bs, or restart the daemon with a larger --max-shared-memory)\n",
				strerror(-err));
		else if (err == -EMFILE)
			log_err("zonefold: daemon refused the connection: %s (the daemon is out "
				"of file descriptors: run fewer jobs at once, or raise its limit on "
				"open files: ulimit -n, systemd's LimitNOFILE=)\n", strerror(-err));
		else if (err == -EUSERS)
			log_err("zonefold: daemon refused the connection: %s (the daemon serves "
				"--max-clients clients already: run fewer jobs at once, or restart "
				"it with a larger --max-clients)\n", strerror(-err));
		else
			log_err("zonefold: daemon refused the connection: %s\n", strerror(-err));
		goto fail;
	}
	if (memfd < 0 && (mh.msg_flags & MSG_CTRUNC)) {
		/* The kernel had no descriptor to give this process for the
		 * region's memfd, and dropped it. */
		log_err("zonefold: the daemon's region did not arrive: this process is out of "
			"file descriptors (ulimit -n; jobs run as threads share one limit)\n");
		err = -EMFILE;
		goto fail;
	}
	region = get64(rep + 16);
	map = get64(rep + 40);
	if (n != ZF_HELLO_REPLY_SIZE || memfd < 0 || region < want || !rings_fit(rep, region, map)) {
		log_err("zonefold: the daemon's hello reply does not describe the region asked for\n");
		err = -EPROTO;
		goto fail;
	}
	mem = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (mem == MAP_FAILED) {
		err = -errno;
		goto fail;
	}
	close(memfd);
	prefault(mem, region - ZF_CTL_BYTES, map, page);
	zd->mapped = mem;
	zd->map_len = map;
	zd->region = mem;
	zd->region_len = region;
	zd->max_inflight = get32(rep + 24);
	zd->max_io = get32(rep + 28);
	ring = zd->mapped + get64(rep + 32);
	zd->entries = get32(rep + 48);
	zd->mask = zd->entries - 1;
	zd->sq_head_p = (uint32_t *) (ring + ZF_SQ_HEAD);
	zd->sq_tail_p = (uint32_t *) (ring + ZF_SQ_TAIL);
	zd->sq_flags_p = (uint32_t *) (ring + ZF_SQ_FLAGS);
	zd->cq_head_p = (uint32_t *) (ring + ZF_CQ_HEAD);
	zd->cq_tail_p = (uint32_t *) (ring + ZF_CQ_TAIL);
	zd->cq_flags_p = (uint32_t *) (ring + ZF_CQ_FLAGS);
	zd->cq_want_p = (uint32_t *) (ring + ZF_CQ_WANT);
	zd->sqes = ring + get32(rep + 52);
	zd->cqes = ring + get32(rep + 56);
	zd->sq_tail = zd->cq_head = 0;
	zd->fd = fd;
	return 0;
fail:
	if (memfd >= 0)
		close(memfd);
	close(fd);
	return err;
}

/* doorbell wakes the daemon; a full socket means it has doorbells to read. */
static int doorbell(struct zf_data *zd)
{
	char b = 'C';

	if (send(zd->fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno != EAGAIN && errno != EINTR)
		return -errno;
	return 0;
}

/*
 * The flag words are where the client and the daemon meet: every access
 * to one is an atomic read-modify-write (set_flag, claim_flag), by both
 * sides, so their accesses are totally ordered and each acquires what
 * the one before it released. Either the side that publishes a tail
 * (then claims the flag) or the side that falls asleep (sets the flag,
 * then loads that tail) sees the other, whatever the other side's loads
 * and stores are: a daemon built with Go's race detector, for one, does
 * plain loads and stores on the region (docs/protocol.md, "Sleeping").
 */
static void set_flag(uint32_t *w, uint32_t bit)
{
	__atomic_fetch_or(w, bit, __ATOMIC_SEQ_CST);
}

/* claim_flag clears bit and says whether it was set. */
static int claim_flag(uint32_t *w, uint32_t bit)
{
	return (__atomic_fetch_and(w, ~bit, __ATOMIC_SEQ_CST) & bit) != 0;
}

/* wake_daemon rings the doorbell if the daemon sleeps. */
static int wake_daemon(struct zf_data *zd)
{
	return claim_flag(zd->sq_flags_p, ZF_SQ_NEED_WAKEUP) ? doorbell(zd) : 0;
}

/*
 * publish puts n encoded requests on the submission ring and publishes
 * them; it rings the doorbell only if the daemon sleeps. The caller
 * keeps at most entries requests outstanding.
 */
static int publish(struct zf_data *zd, const uint8_t *reqs, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		memcpy(zd->sqes + ((zd->sq_tail + i) & zd->mask) * ZF_REQ_SIZE, reqs + i * ZF_REQ_SIZE,
		       ZF_REQ_SIZE);
	zd->sq_tail += n;
	__atomic_store_n(zd->sq_tail_p, zd->sq_tail, __ATOMIC_RELEASE);
	return wake_daemon(zd);
}

/* complete hands an answered io_u to the done ring and frees its slot. */
static void complete(struct zf_data *zd, uint32_t slot, uint32_t status, uint64_t val)
{
	struct io_u *io_u = zd->slots[slot];

	zd->slots[slot] = NULL;
	zd->slot_state[slot] = ZF_SLOT_FREE;
	zd->free_slots[zd->nfree++] = slot;
	if (status)
		io_u->error = status;
	else if (io_u->ddir == DDIR_READ && !val && io_u->xfer_buflen) {
		/*
		 * A read at or past the file's end: fio's sync engines (psync,
		 * its default) fail it with EIO ("full resid"); fio takes it
		 * from an async engine as a read of nothing and goes on, the
		 * job reading nothing, exit 0. Fail it as psync does.
		 */
		if (!zd->eof_logged++)
			log_err("zonefold: read of %s at %llu found the file's end: it is shorter "
				"than the job's range\n", io_u->file->file_name,
				(unsigned long long) io_u->offset);
		io_u->error = EIO;
	} else if (ddir_rw(io_u->ddir) && val < io_u->xfer_buflen)
		io_u->resid = io_u->xfer_buflen - val;
	zd->done[(zd->done_head + zd->done_count) % zd->done_cap] = io_u;
	zd->done_count++;
	zd->inflight--;
}

/*
 * abandon fails every request in flight with err (an errno) once the
 * connection is gone (the daemon closed it or broke the protocol), and
 * every later one at once: no reply will come for them, and fio waits
 * for every io_u it queued (io_u_quiesce loops on its in-flight count
 * and ignores getevents' errors), so a rate-limited job whose daemon
 * stopped waited for ever, logging the closed connection every slice.
 * Requests encoded but not committed (pending) are not in flight.
 */
static void abandon(struct zf_data *zd, int err)
{
	uint32_t slot;
	unsigned int i;

	if (!zd->dead)
		zd->dead = err;
	for (slot = 0; slot < zd->done_cap && zd->inflight; slot++) {
		if (zd->slot_state[slot] == ZF_SLOT_FREE)
			continue;
		for (i = 0; i < zd->npending && zd->pending[i] != zd->slots[slot]; i++)
			;
		if (i == zd->npending)
			complete(zd, slot, err, 0);
	}
}

/*
 * reap takes every reply the daemon has published. Returns replies
 * taken or -errno.
 */
static int reap(struct zf_data *zd)
{
	uint32_t tail = __atomic_load_n(zd->cq_tail_p, __ATOMIC_ACQUIRE);
	uint32_t k = tail - zd->cq_head, i;
	unsigned int nfs = 0;
	struct io_u *io_u;
	uint64_t val, slot;
	int err;

	if (k > zd->entries) {
		log_err("zonefold: the daemon's completion tail %u is more than a ring past %u\n", tail,
			zd->cq_head);
		return -EPROTO;
	}
	for (i = 0; i < k; i++) {
		const uint8_t *b = zd->cqes + ((zd->cq_head + i) & zd->mask) * ZF_REP_SIZE;
		uint64_t tag = get64(b);
		uint32_t status = get32(b + 8);

		if ((tag & 1) && tag != ZF_SYNC_TAG && !((tag >> 1) & ZF_TAG_SLOT_MASK) &&
		    zd->batch_left && (tag >> 32) - 1 < zd->batch_n &&
		    zd->batch_status[(tag >> 32) - 1] == UINT32_MAX) {
			/* A reply to one of a batch's requests (zf_batch_run). */
			slot = (tag >> 32) - 1;
			zd->batch_status[slot] = status;
			zd->batch_val[slot] = get64(b + 16);
			zd->batch_val2[slot] = get64(b + 24);
			zd->batch_left--;
			continue;
		}
		if (tag == ZF_SYNC_TAG && zd->sync_waiting) {
			zd->sync_waiting = 0;
			zd->sync_status = status;
			zd->sync_val = get64(b + 16);
			zd->sync_val2 = get64(b + 24);
			continue;
		}
		slot = ((tag >> 1) & ZF_TAG_SLOT_MASK) - 1;
		if (((tag >> 1) & ZF_TAG_SLOT_MASK) == 0 || slot >= zd->done_cap ||
		    zd->slot_state[slot] != ((tag & 1) ? ZF_SLOT_FSYNC : ZF_SLOT_IO) ||
		    (uint32_t) (tag >> 32) != zd->slot_gen[slot]) {
			log_err("zonefold: reply with a tag %#llx that names no outstanding request\n",
				(unsigned long long) tag);
			return -EPROTO;
		}
		io_u = zd->slots[slot];
		if (tag & 1) {
			/* The fsync that makes a sync=1 write durable. */
			complete(zd, slot, status, io_u->xfer_buflen - io_u->resid);
			continue;
		}
		val = get64(b + 16);
		if (!zd->sync_writes || io_u->ddir != DDIR_WRITE || status) {
			complete(zd, slot, status, val);
			continue;
		}
		/*
		 * sync=1: the write completes only once an fsync of its file
		 * has; the fsync takes the write's place in the ring, so what
		 * is outstanding does not grow, and each slot does this once:
		 * fsbuf (done_cap requests) holds them all.
		 */
		io_u->resid = val < io_u->xfer_buflen ? io_u->xfer_buflen - val : 0;
		zd->slot_state[slot] = ZF_SLOT_FSYNC;
		encode_req(zd->fsbuf + nfs * ZF_REQ_SIZE, tag | 1, ZF_OP_FSYNC, 0,
			   (uint32_t) (uintptr_t) FILE_ENG_DATA(io_u->file), 0, 0, 0);
		nfs++;
	}
	zd->cq_head = tail;
	__atomic_store_n(zd->cq_head_p, tail, __ATOMIC_RELEASE);
	if (nfs && (err = publish(zd, zd->fsbuf, nfs)) < 0)
		return err;
	return k;
}

static long futex(uint32_t *word, int op, uint32_t val, const struct timespec *t)
{
	return syscall(SYS_futex, word, op, val, t, NULL, 0);
}

/*
 * wait_replies waits until the daemon publishes want replies (at least
 * one), for at most timeout_ms (-1: no limit): if the job may wait
 * busily (busy_waits), a short spin if the daemon has lately answered
 * within a few microseconds, then yields of the CPU if it has lately
 * answered within a millisecond (both end at the first reply); then
 * sleep with ZF_CQ_WAITING and ZF_CQ_WANTS set on that word's futex and
 * cq_head + want in the cq_want word (the daemon clears the flag and
 * wakes it once it has published that far, or has answered everything
 * it took), in slices of ZF_SLICE_MS, checking between them that the
 * daemon is still there (its end of the socket) and, as a safety net
 * against a lost wakeup (a bug), ringing the doorbell again if the daemon
 * sleeps with requests it has not taken. Returns 0 or -errno; 0 also
 * when the time is up.
 */
static int wait_replies(struct zf_data *zd, int timeout_ms, uint32_t want)
{
	const uint32_t flags = ZF_CQ_WAITING | ZF_CQ_WANTS;
	uint64_t start = now_ns(), limit;
	struct timespec slice = { 0, ZF_SLICE_MS * 1000000L };
	char b[16];
	ssize_t n;
	int ret = 0;

	if (!zd->busy_waits)
		goto sleep_now;
	if (zd->gap_ns < ZF_SPIN_MAX_NS) {
		limit = zd->gap_ns * 2 > ZF_SPIN_MAX_NS / 8 ? zd->gap_ns * 2 : ZF_SPIN_MAX_NS / 8;
		while (now_ns() - start < limit) {
			if (__atomic_load_n(zd->cq_tail_p, __ATOMIC_ACQUIRE) != zd->cq_head) {
				zd->waits_spun++;
				goto out;
			}
			cpu_relax();
		}
	}
	if (zd->gap_ns < ZF_YIELD_GATE_NS) {
		while (now_ns() - start < ZF_YIELD_NS) {
			if (__atomic_load_n(zd->cq_tail_p, __ATOMIC_ACQUIRE) != zd->cq_head) {
				zd->waits_yielded++;
				goto out;
			}
			sched_yield();
		}
	}
sleep_now:
	if (want < 1)
		want = 1;
	for (;;) {
		/*
		 * The daemon stores the tail, then looks at the flag. The want
		 * word is published by the flag's read-modify-write.
		 */
		__atomic_store_n(zd->cq_want_p, zd->cq_head + want, __ATOMIC_RELAXED);
		set_flag(zd->cq_flags_p, flags);
		if (__atomic_load_n(zd->cq_tail_p, __ATOMIC_ACQUIRE) - zd->cq_head >= want)
			break;
		if (timeout_ms >= 0 && now_ns() - start >= (uint64_t) timeout_ms * 1000000ULL)
			break;
		/*
		 * Woken, or the word changed: the daemon wakes us when want
		 * replies are there or nothing more will come; take what is.
		 */
		if (futex(zd->cq_flags_p, FUTEX_WAIT, flags, &slice) == 0 ||
		    __atomic_load_n(zd->cq_tail_p, __ATOMIC_ACQUIRE) != zd->cq_head)
			break;
		if (__atomic_load_n(zd->sq_head_p, __ATOMIC_ACQUIRE) != zd->sq_tail &&
		    (ret = wake_daemon(zd)) < 0)
			break;
		/*
		 * The daemon sends nothing on the socket: readable is its end.
		 * Replies it published before it went (it stores the tail
		 * before its socket closes) are results, an fsync's success
		 * among them: the caller takes them first, and the next wait
		 * finds the end again (a reset is reported once, then the end
		 * of stream).
		 */
		n = recv(zd->fd, b, sizeof(b), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			if (__atomic_load_n(zd->cq_tail_p, __ATOMIC_ACQUIRE) != zd->cq_head)
				break;
			log_err("zonefold: the daemon closed the connection\n");
			ret = -ECONNRESET;
			break;
		}
	}
	claim_flag(zd->cq_flags_p, flags);
	zd->waits_slept++;
out:
	zd->gap_ns += ((int64_t) (now_ns() - start) - (int64_t) zd->gap_ns) / 8;
	return ret;
}

/*
 * zf_clean_name writes name to dst (cap bytes, not NUL-terminated) as a
 * kernel file system resolves it, and returns its length or
 * -ENAMETOOLONG. The daemon's names are raw strings with no directories,
 * while fio builds names as paths (directory= + "/" + filename, so
 * directory=DIR/ gives "DIR//f"): without this, "DIR//f", "DIR/f" and
 * "./DIR/f" would be three files where fio's own engines see one.
 * Repeated slashes collapse and "." components and a trailing slash go
 * ("a//b/" and "./a/./b" are "a/b"). A leading "/" stays: the daemon's
 * "/x" and "x" are different files, and users' files have such names.
 * ".." stays too: the daemon has no directories to go up from, and a
 * user may mean it literally. A name of nothing but "." (".", "./") is
 * ".", which names no file on a kernel file system either; an empty
 * name stays empty.
 */
static int zf_clean_name(char *dst, const char *name, size_t cap)
{
	const char *p = name, *c;
	size_t len = 0, n;

	if (*p == '/') {
		if (cap < 1)
			return -ENAMETOOLONG;
		dst[len++] = '/';
	}
	for (;;) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		for (c = p; *c && *c != '/'; c++)
			;
		n = c - p;
		if (!(n == 1 && *p == '.')) {
			if (len && dst[len - 1] != '/') {
				if (len >= cap)
					return -ENAMETOOLONG;
				dst[len++] = '/';
			}
			if (n > cap - len)
				return -ENAMETOOLONG;
			memcpy(dst + len, p, n);
			len += n;
		}
		p = c;
	}
	if (!len && *name) {
		if (cap < 1)
			return -ENAMETOOLONG;
		dst[len++] = '.';
	}
	return (int) len;
}

/*
 * sync_call runs one request and waits for its reply, reaping I/O
 * replies that arrive meanwhile. name, if set, goes to the control area,
 * cleaned (zf_clean_name): every name the engine sends to the daemon
 * (open, stat, remove) comes through here, so none escapes the cleaning.
 * It cleans into the control area rather than f->file_name in place:
 * the string is fio's, which keys its file hash with it (filehash.c: a
 * name changed in place would sit in the wrong bucket), seeds random
 * offsets from it and prints it, and it may be shared between jobs.
 * The copy into the control area is needed anyway, names go only with
 * opens, stats and removes (never with I/O), so cleaning as it copies
 * costs nothing that matters.
 * Returns the reply's status as -errno.
 */
static int sync_req(struct zf_data *zd, uint8_t op, uint8_t flags, uint32_t handle, uint64_t off,
		    uint64_t addr, uint32_t len);
static int sync_run(struct zf_data *zd, const uint8_t *req);

static int sync_call(struct zf_data *zd, uint8_t op, uint8_t flags, uint32_t handle, uint64_t off,
		     const char *name)
{
	uint64_t ctl = zd->region_len - ZF_CTL_BYTES;
	int err;

	if (zd->dead)
		return -zd->dead;
	if (!name)
		return sync_req(zd, op, flags, handle, off, 0, 0);
	if ((err = zf_clean_name((char *) zd->region + ctl, name, ZF_CTL_BYTES - 1)) < 0)
		return err;
	return sync_req(zd, op, flags, handle, off, ctl, (uint32_t) err);
}

/*
 * sync_req runs one request on [addr, addr + len) of the region (a name
 * in the control area, or data) and waits for its reply, as sync_call.
 */
static int sync_req(struct zf_data *zd, uint8_t op, uint8_t flags, uint32_t handle, uint64_t off,
		    uint64_t addr, uint32_t len)
{
	uint8_t req[ZF_REQ_SIZE];

	encode_req(req, ZF_SYNC_TAG, op, flags, handle, off, addr, len);
	return sync_run(zd, req);
}

/* sync_run runs one encoded request tagged ZF_SYNC_TAG, as sync_req. */
static int sync_run(struct zf_data *zd, const uint8_t *req)
{
	int err;

	if (zd->dead)
		return -zd->dead;
	if (zd->inflight + 1 > zd->entries)
		return -EBUSY; /* cannot happen: init asked for done_cap + 1 entries */
	zd->sync_waiting = 1;
	if ((err = publish(zd, req, 1)) < 0)
		return err;
	while (zd->sync_waiting) {
		if ((err = reap(zd)) < 0)
			return err;
		if (zd->sync_waiting && (err = wait_replies(zd, -1, 1)) < 0)
			return err;
	}
	return -(int) zd->sync_status;
}

/*
 * zf_batch_run publishes n encoded requests at once (n at most ZF_BATCH
 * and the ring's entries) and waits for every reply: batch_status[i] (an
 * errno or 0), batch_val[i] and batch_val2[i] are request i's. Their
 * tags are i + 1 in the high half and 1 in the low (what no io_u's tag
 * and not ZF_SYNC_TAG is). Returns 0, or -errno if the connection
 * failed: it is then dead.
 */
static int zf_batch_run(struct zf_data *zd, uint8_t *reqs, unsigned int n)
{
	unsigned int i;
	int err;

	if (zd->dead)
		return -zd->dead;
	for (i = 0; i < n; i++) {
		zd->batch_status[i] = UINT32_MAX;
		put64(reqs + i * ZF_REQ_SIZE, (uint64_t) (i + 1) << 32 | 1);
	}
	zd->batch_n = zd->batch_left = n;
	err = publish(zd, reqs, n);
	while (!err && zd->batch_left) {
		if ((err = reap(zd)) > 0)
			err = 0;
		else if (!err)
			err = wait_replies(zd, -1, zd->batch_left);
	}
	if (err < 0 && !zd->dead)
		zd->dead = -err;
	return err < 0 ? err : 0;
}

/*
 * zf_rename renames the daemon's file from to to, replacing to's file
 * if there is one (durable when answered; handles that have the
 * replaced file open keep it). Both names go to the control area,
 * cleaned as sync_call cleans them. Returns 0 or -errno.
 */
static int zf_rename(struct zf_data *zd, const char *from, const char *to)
{
	uint64_t ctl = zd->region_len - ZF_CTL_BYTES;
	uint8_t req[ZF_REQ_SIZE];
	int a, b;

	if (zd->dead)
		return -zd->dead;
	if ((a = zf_clean_name((char *) zd->region + ctl, from, ZF_CTL_BYTES / 2)) < 0)
		return a;
	if ((b = zf_clean_name((char *) zd->region + ctl + a, to, ZF_CTL_BYTES - 1 - a)) < 0)
		return b;
	encode_req(req, ZF_SYNC_TAG, ZF_OP_RENAME, 0, 0, 0, ctl, (uint32_t) a);
	put32(req + 36, (uint32_t) b);
	return sync_run(zd, req);
}

/*
 * zf_temp_name writes a fresh temporary name (ZF_TEMP_PREFIX and 16 hex
 * digits, as zonefold put's) to dst, of cap > 31 bytes.
 */
static void zf_temp_name(char *dst, size_t cap)
{
	static unsigned long counter;
	uint64_t r;

	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t) sizeof(r))
		r = now_ns() ^ (uint64_t) getpid() << 32 ^
		    __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) * 0x9e3779b97f4a7c15ULL;
	snprintf(dst, cap, "%s%016llx", ZF_TEMP_PREFIX, (unsigned long long) r);
}

static void zf_free(struct zf_data *zd)
{
	if (!zd)
		return;
	if (zd->fd >= 0)
		close(zd->fd);
	if (zd->mapped)
		munmap(zd->mapped, zd->map_len);
	free(zd->idle_sock);
	free(zd->sbuf);
	free(zd->fsbuf);
	free(zd->pending);
	free(zd->done);
	free(zd->events);
	free(zd->slots);
	free(zd->slot_state);
	free(zd->slot_gen);
	free(zd->free_slots);
	free(zd);
}

/*
 * data_bytes is an upper bound of what fio will ask iomem_alloc for: its
 * buffers (max_bs per io_u) plus the alignment slack it may add
 * (init_io_u_buffers and allocate_io_mem in fio's source).
 */
static size_t data_bytes(struct thread_data *td)
{
	size_t page = sysconf(_SC_PAGESIZE);

	return (size_t) td_max_bs(td) * (td->o.iodepth ? td->o.iodepth : 1) + 2 * page +
	       2 * (size_t) td->o.mem_align;
}

/*
 * zf_busy_waits says whether td's waits for replies may spin and yield
 * before they sleep: whether td's group (the jobs fio runs at once, up
 * to a stonewall) has fewer jobs than the CPUs td may run on, so that
 * one is left for the daemon. The count includes jobs of other engines.
 */
static int zf_busy_waits(struct thread_data *td, struct zf_data *zd)
{
	struct thread_data *t;
	cpu_set_t cpus;
	int i;

	if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0)
		zd->cpus = CPU_COUNT(&cpus);
	else
		zd->cpus = (int) sysconf(_SC_NPROCESSORS_ONLN);
	zd->group_jobs = 0;
	for_each_td(t, i) {
		if (t->groupid == td->groupid)
			zd->group_jobs++;
	}
	return zd->group_jobs < zd->cpus;
}

/*
 * Setup connections. fio sets files up one at a time, outside any job's
 * I/O: zf_setup stats them, zf_prepopulate_file lays each out. Those
 * calls cannot use a job's connection (the job's region holds fio's
 * buffers, and in fio's parent, where setup runs unless
 * create_serialize=0, there is no job), and a connection of their own
 * per call (socket, hello, the daemon's region mapped and unmapped) cost
 * more than the layout itself: fio --create_only=1 --nrfiles=4200
 * --filesize=4k took 8-13 s and 4201 connections. So each thread that
 * sets files up keeps one between its calls (zf_setup_take,
 * zf_setup_keep), on a list of idle ones that says whose each is.
 *
 * The idle ones go once setup is done, so that none holds one of the
 * daemon's clients (--max-clients) or its shared memory while the jobs
 * run: every one when fio forks its jobs (a fork handler, in the parent
 * and before the child has a copy) and when a job starts (zf_init:
 * fio's jobs as threads of the parent, or a job that sets its own files
 * up, create_serialize=0: a thread setting up meanwhile connects again),
 * the job's own when it opens a file for I/O (zf_open_file: its setup is
 * done then) and at its end, and every one when the engine is unloaded.
 * zf_setup_mu is a leaf lock: nothing else is taken under it.
 */
static pthread_mutex_t zf_setup_mu = PTHREAD_MUTEX_INITIALIZER;
static struct zf_data *zf_setup_idle; /* the list, under zf_setup_mu */
static pthread_once_t zf_setup_once = PTHREAD_ONCE_INIT;

/*
 * zf_setup_unlink takes the idle connections of this thread (all: every
 * one) off the list and returns them, as a list; under zf_setup_mu.
 * Connections another process made (copied by a fork that ran no
 * handler) go too: they are not this process's to use.
 */
static struct zf_data *zf_setup_unlink(int all)
{
	struct zf_data **p = &zf_setup_idle, *out = NULL, *zd;
	pid_t pid = getpid();

	while ((zd = *p)) {
		if (all || zd->idle_pid != pid || pthread_equal(zd->idle_tid, pthread_self())) {
			*p = zd->idle_next;
			zd->idle_next = out;
			out = zd;
		} else
			p = &zd->idle_next;
	}
	return out;
}

static void zf_free_list(struct zf_data *zd)
{
	struct zf_data *next;

	for (; zd; zd = next) {
		next = zd->idle_next;
		zf_free(zd);
	}
}

/* zf_setup_drop closes this thread's idle setup connection (all: every one). */
static void zf_setup_drop(int all)
{
	struct zf_data *zd;

	if (!__atomic_load_n(&zf_setup_idle, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&zf_setup_mu);
	zd = zf_setup_unlink(all);
	pthread_mutex_unlock(&zf_setup_mu);
	zf_free_list(zd);
}

/* glibc unregisters these fork handlers when the engine is unloaded. */
static void zf_fork_prepare(void)
{
	pthread_mutex_lock(&zf_setup_mu);
	zf_free_list(zf_setup_unlink(1));
}

static void zf_fork_done(void)
{
	pthread_mutex_unlock(&zf_setup_mu);
}

static void zf_setup_register(void)
{
	pthread_atfork(zf_fork_prepare, zf_fork_done, zf_fork_done);
}

__attribute__((destructor)) static void zf_setup_unload(void)
{
	zf_setup_drop(1);
}

/*
 * zf_setup_take returns a setup connection to td's daemon whose region
 * holds data_bytes: this thread's idle one if it fits, else a new one;
 * NULL with *err (-errno, logged) if it cannot connect. The caller gives
 * it back to zf_setup_keep, with no handle open.
 */
static struct zf_data *zf_setup_take(struct thread_data *td, size_t data_bytes, int *err)
{
	struct zf_data *zd, *mine;

	pthread_once(&zf_setup_once, zf_setup_register);
	pthread_mutex_lock(&zf_setup_mu);
	mine = zf_setup_unlink(0);
	pthread_mutex_unlock(&zf_setup_mu);
	for (zd = mine; zd; zd = zd->idle_next) {
		if (zd->idle_pid == getpid() && !strcmp(zd->idle_sock, sock_path(td)) &&
		    zd->region_len - ZF_CTL_BYTES >= data_bytes)
			break;
	}
	if (zd) {
		struct zf_data **p = &mine;

		while (*p != zd)
			p = &(*p)->idle_next;
		*p = zd->idle_next;
		zd->idle_next = NULL;
	}
	zf_free_list(mine);
	if (!zd) {
		if (!(zd = calloc(1, sizeof(*zd)))) {
			*err = -ENOMEM;
			return NULL;
		}
		zd->fd = -1;
		zd->ring_want = ZF_BATCH;
		if ((*err = zf_connect(td, zd, data_bytes)) < 0) {
			zf_free(zd);
			return NULL;
		}
	}
	zd->busy_waits = zf_busy_waits(td, zd);
	return zd;
}

/*
 * zf_setup_keep gives zd back, kept idle for this thread's next setup
 * call, unless it is broken (the daemon gone, a reply never taken): then
 * it is closed.
 */
static void zf_setup_keep(struct thread_data *td, struct zf_data *zd)
{
	struct zf_data *old;

	if (!zd)
		return;
	free(zd->idle_sock);
	if (zd->dead || zd->sync_waiting || zd->inflight || zd->batch_left ||
	    !(zd->idle_sock = strdup(sock_path(td)))) {
		zd->idle_sock = NULL;
		zf_free(zd);
		return;
	}
	zd->idle_pid = getpid();
	zd->idle_tid = pthread_self();
	pthread_mutex_lock(&zf_setup_mu);
	old = zf_setup_unlink(0);
	zd->idle_next = zf_setup_idle;
	zf_setup_idle = zd;
	pthread_mutex_unlock(&zf_setup_mu);
	zf_free_list(old);
}

/*
 * init runs in the job: it connects, so that a job the daemon cannot
 * serve is refused here, with the reason, before fio sets up its
 * buffers (fio does not check the result of iomem_alloc). setup
 * (zf_refused) refuses the same jobs earlier, before their files are
 * laid out.
 *
 * io_submit_mode=offload is refused: fio then queues from worker
 * threads, each a thread_data of its own whose init makes a connection
 * of its own, while the io_us' buffers live in the job's region of the
 * job's connection; the daemon rejected their offsets (EFAULT, "Bad
 * address"). Workers init with the job's options copied, so they are
 * refused too, but the job's own init comes first.
 *
 * mem=/iomem= is refused: fio calls iomem_alloc only when neither is
 * set, and otherwise runs the job with no buffers at all (a crash).
 */
/*
 * zf_refused refuses, naming the option, a job the daemon cannot serve
 * by its options (file names included) alone (with max_io, the daemon's largest read or write,
 * once known: 0 skips that check). setup calls it before anything
 * touches the job's files, init again (create_serialize=0 runs init
 * first): fio sets the files up before init, and a job refused only in
 * init had already had an existing shorter file replaced by its layout
 * (TestH41cRefusedFioJobLeavesTheFileAlone). Returns 1 if refused.
 */
static int zf_refused(struct thread_data *td, uint32_t max_io)
{
	unsigned int depth = td->o.iodepth ? td->o.iodepth : 1;
	struct fio_file *f;
	unsigned int i;
	char name[ZF_CTL_BYTES];
	int len;

	for_each_file(td, f, i) {
		/*
		 * The daemon removes every file whose name has the prefix of
		 * put's temporaries at its start (docs/protocol.md): the job's
		 * data, fsynced or not, would be gone after a restart.
		 */
		len = zf_clean_name(name, f->file_name, sizeof(name) - 1);
		if (len >= (int) strlen(ZF_TEMP_PREFIX) &&
		    !memcmp(name, ZF_TEMP_PREFIX, strlen(ZF_TEMP_PREFIX))) {
			log_err("zonefold: %s: names starting with %s are reserved for the "
				"daemon's temporary files, which it removes when it starts: "
				"choose another filename\n", f->file_name, ZF_TEMP_PREFIX);
			td_verror(td, EINVAL, "zonefold filename");
			return 1;
		}
	}

	if (td->o.io_submit_mode == IO_MODE_OFFLOAD) {
		log_err("zonefold: io_submit_mode=offload is not supported: fio's offload "
			"threads would submit on connections that do not hold the job's "
			"buffers (use the default io_submit_mode=inline)\n");
		td_verror(td, EINVAL, "zonefold io_submit_mode");
		return 1;
	}
	if (td_trim(td)) {
		/* Otherwise every trim fails with a bare EOPNOTSUPP. */
		log_err("zonefold: rw=%s is not supported: the daemon has no trim (use "
			"read, write or a mix of them)\n", ddir_str(td->o.td_ddir));
		td_verror(td, EINVAL, "zonefold rw trim");
		return 1;
	}
	if (td->o.trim_percentage) {
		/*
		 * verify's trims are io_us of a job that does not trim: fio
		 * asserted in fio_ro_check from queue and died of SIGABRT.
		 */
		log_err("zonefold: trim_percentage is not supported: the daemon has no trim "
			"(leave trim_percentage unset)\n");
		td_verror(td, EINVAL, "zonefold trim_percentage");
		return 1;
	}
	if (td->o.sync_file_range) {
		/* Otherwise every range sync fails with a bare EOPNOTSUPP. */
		log_err("zonefold: sync_file_range is not supported: the daemon syncs whole "
			"files (use fsync=N or fdatasync=N)\n");
		td_verror(td, EINVAL, "zonefold sync_file_range");
		return 1;
	}
	if (fio_option_is_set(&td->o, mem_type)) {
		/*
		 * fio then skips iomem_alloc ("option 'mem/iomem' conflicts")
		 * yet runs the job with no buffers: it dies with SIGSEGV.
		 */
		log_err("zonefold: mem=/iomem= is not supported: the job's buffers must live "
			"in the daemon's shared region, which the engine allocates (leave "
			"mem/iomem unset)\n");
		td_verror(td, EINVAL, "zonefold mem");
		return 1;
	}
	if ((unsigned long long) data_bytes(td) + ZF_CTL_BYTES > ZF_MAX_REGION) {
		/*
		 * The daemon would refuse the hello with a bare EINVAL. The need
		 * is rounded up: rounded down, a job just past the limit was told
		 * it needed as much as the limit.
		 */
		log_err("zonefold: the job's buffers (bs %llu x iodepth %u) need %llu MiB of "
			"shared memory, above the protocol's limit of %llu MiB: lower bs or iodepth\n",
			(unsigned long long) td_max_bs(td), depth,
			((unsigned long long) data_bytes(td) + ZF_CTL_BYTES + (1 << 20) - 1) >> 20,
			ZF_MAX_REGION >> 20);
		td_verror(td, EINVAL, "zonefold region");
		return 1;
	}
	/* The rings hold at most ZF_MAX_RING: the io_us, the end fsync and an open or close. */
	if (depth + 2 > ZF_MAX_RING) {
		log_err("zonefold: iodepth %u is above the daemon's limit of %u "
			"(its rings hold %u requests per job: the io_us, fio's end-of-job fsync "
			"and an open or close)\n",
			depth, ZF_MAX_RING - 2, ZF_MAX_RING);
		td_verror(td, EINVAL, "zonefold iodepth");
		return 1;
	}
	if (max_io && td_max_bs(td) > max_io) {
		/*
		 * Otherwise the first such I/O fails with a bare E2BIG, or
		 * the layout's first write does, the file already replaced.
		 */
		log_err("zonefold: bs %llu (the job's largest block: bs, bsrange or bssplit) is "
			"above the daemon's limit of %u MiB per read or write: lower bs\n",
			(unsigned long long) td_max_bs(td), max_io >> 20);
		td_verror(td, EINVAL, "zonefold bs");
		return 1;
	}
	return 0;
}

static int zf_init(struct thread_data *td)
{
	struct zf_data *zd;
	unsigned int depth = td->o.iodepth ? td->o.iodepth : 1;
	int err;

	zf_setup_drop(1); /* the jobs start: fio's setup is done (as threads, in this process) */
	if (zf_refused(td, 0))
		return 1;
	zd = calloc(1, sizeof(*zd));
	if (!zd)
		return 1;
	zd->fd = -1;
	td->io_ops_data = zd;
	/* One extra for the end-of-job fsync fio queues outside iodepth. */
	zd->done_cap = depth + 1;
	if ((err = zf_connect(td, zd, data_bytes(td))) < 0) {
		td_verror(td, -err, "zonefold connect");
		return 1;
	}
	if (zf_refused(td, zd->max_io))
		return 1;
	if (zd->entries < zd->done_cap + 1) {
		log_err("zonefold: iodepth %u is above the daemon's limit of %u "
			"(its rings hold %u requests per job: the io_us, fio's end-of-job fsync "
			"and an open or close)\n",
			depth, zd->entries - 2, zd->entries);
		td_verror(td, EINVAL, "zonefold iodepth");
		return 1;
	}
	zd->sbuf = malloc((size_t) zd->done_cap * ZF_REQ_SIZE);
	zd->sync_writes = td->o.sync_io != 0;
	zd->busy_waits = zf_busy_waits(td, zd);
	if (td->o.odirect && td->subjob_number == 0)
		log_info("zonefold: direct=1 has no effect: every write goes through the "
			 "daemon's cache and completes once the cache holds it (durable at an "
			 "fsync: fsync=N, end_fsync=1 or sync=1)\n");
	zd->fsbuf = malloc((size_t) zd->done_cap * ZF_REQ_SIZE);
	zd->pending = calloc(zd->done_cap, sizeof(*zd->pending));
	zd->done = calloc(zd->done_cap, sizeof(*zd->done));
	zd->events = calloc(zd->done_cap, sizeof(*zd->events));
	zd->slots = calloc(zd->done_cap, sizeof(*zd->slots));
	zd->slot_state = calloc(zd->done_cap, sizeof(*zd->slot_state));
	zd->slot_gen = calloc(zd->done_cap, sizeof(*zd->slot_gen));
	zd->free_slots = calloc(zd->done_cap, sizeof(*zd->free_slots));
	if (!zd->sbuf || !zd->fsbuf || !zd->pending || !zd->done || !zd->events || !zd->slots ||
	    !zd->slot_state || !zd->slot_gen || !zd->free_slots) {
		td_verror(td, ENOMEM, "zonefold init");
		return 1;
	}
	for (zd->nfree = 0; zd->nfree < zd->done_cap; zd->nfree++)
		zd->free_slots[zd->nfree] = zd->done_cap - 1 - zd->nfree;
	return 0;
}

/*
 * fio's buffers are the region's data part: requests name offsets in it.
 * init sized the region; should fio want more, no file is open yet, so
 * a new connection with a larger region replaces the first.
 */
static int zf_iomem_alloc(struct thread_data *td, size_t size)
{
	struct zf_data *zd = td->io_ops_data;
	int err;

	if (zd->fd < 0 || zd->region_len - ZF_CTL_BYTES < size) {
		if (zd->fd >= 0) {
			close(zd->fd);
			munmap(zd->mapped, zd->map_len);
			zd->fd = -1;
			zd->mapped = zd->region = NULL;
		}
		if ((err = zf_connect(td, zd, size)) < 0) {
			td_verror(td, -err, "zonefold connect");
			return 1;
		}
	}
	td->orig_buffer = (char *) zd->region;
	return 0;
}

static void zf_iomem_free(struct thread_data *td)
{
	/* The region is unmapped when the job's connection closes. */
}

/*
 * zf_write_stats appends one line about the job's waits for replies to
 * the file $ZONEFOLD_FIO_STATS names, if set: whether it waited busily
 * and why (its group's jobs, the CPUs it may run on) and how its waits
 * ended. One write(2) with O_APPEND per job, so jobs' lines do not mix.
 */
static void zf_write_stats(struct thread_data *td, struct zf_data *zd)
{
	const char *path = getenv("ZONEFOLD_FIO_STATS");
	char line[256];
	int fd, n;

	if (!path || !*path)
		return;
	n = snprintf(line, sizeof(line),
		     "job=%s busy_waits=%d group_jobs=%d cpus=%d spun=%lu yielded=%lu slept=%lu\n",
		     td->o.name, zd->busy_waits, zd->group_jobs, zd->cpus, zd->waits_spun,
		     zd->waits_yielded, zd->waits_slept);
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0) {
		log_err("zonefold: ZONEFOLD_FIO_STATS %s: %s\n", path, strerror(errno));
		return;
	}
	if (n > 0 && write(fd, line, (size_t) n) != n)
		log_err("zonefold: ZONEFOLD_FIO_STATS %s: short write\n", path);
	close(fd);
}

static void zf_cleanup(struct thread_data *td)
{
	zf_setup_drop(0);
	if (td->io_ops_data)
		zf_write_stats(td, td->io_ops_data);
	zf_free(td->io_ops_data);
	td->io_ops_data = NULL;
}

/*
 * zf_sized_by_file says whether fio needs the size of td's files before
 * it sizes the job, as it has a regular file's: a percentage offset= or
 * offset_increment= is a share of it, zonemode=zbd emulates zones over
 * it (init_zone_info), and zonemode=strided wraps to the start at its
 * end (setup_strided_zone_mode), and file_append=1 starts the job's
 * range at it (get_start_offset). Of an unknown size (-1) fio took a
 * share past any file; counted zero zones (its round-up overflows), so
 * that a job with size= wrote every block at the first zone's start,
 * leaving 64 KiB of a 16 MiB sequential write, and verified that; and
 * never wrapped: a 16 MiB strided job left a 61 MiB file.
 */
static int zf_sized_by_file(struct thread_data *td)
{
	return td->o.start_offset_percent || td->o.offset_increment_percent || td->o.file_append ||
	       td->o.zone_mode == ZONE_MODE_ZBD || td->o.zone_mode == ZONE_MODE_STRIDED;
}

/*
 * zf_data_layout says whether td's files, where shorter than the job's
 * range, are laid out with data before it runs, as fio lays out a
 * regular file (setup_files and extend_file in fio's filesetup.c): not
 * with create_on_open=1 (fio then lays out nothing), else for any job
 * that reads (rw=read, randread, rw, randrw...), so that it reads
 * written blocks, and for a job that writes with overwrite=1 (not
 * file_append), so that its writes overwrite written blocks.
 */
static int zf_data_layout(struct thread_data *td)
{
	if (td->o.create_on_open)
		return 0;
	return td_read(td) || (td_write(td) && td->o.overwrite && !td->o.file_append);
}

/*
 * zf_fallocate_layout says whether td's files, where shorter than the
 * job's range, are grown to its end before a job that writes without a
 * data layout, as fio's extend_file allocates a regular file then
 * (fallocate_file): fallocate=native (fio's default on Linux), posix and
 * truncate set the file's size; keep and none leave it; fill_device and
 * create_on_open=1 skip it. A later job of the run sees that size (a
 * file_append=1 job appends after it: fio sets every job's files up
 * before the first job runs).
 */
static int zf_fallocate_layout(struct thread_data *td)
{
	if (!td_write(td) || td->o.create_on_open || td->o.fill_device || zf_data_layout(td))
		return 0;
	return td->o.fallocate_mode == FIO_FALLOCATE_NATIVE ||
	       td->o.fallocate_mode == FIO_FALLOCATE_POSIX ||
	       td->o.fallocate_mode == FIO_FALLOCATE_TRUNCATE;
}

/*
 * zf_layout_unlinks says whether td's files, where shorter than the
 * job's range, are laid out anew from an empty file, as fio's
 * extend_file unlinks a regular file before it lays it out ("layout
 * unlink"): for a job that writes without overwrite=1 or file_append=1
 * (not fill_device, whose layout is its own; create_on_open=1 lays
 * nothing out). On ext4 a 1 MiB file and --rw=write --offset=2m
 * --size=2m leave 4 MiB whose first MiB is zeros, whatever fallocate=
 * says. zf_lay_out_anew gives the name a new file as an unlink and a
 * create would, in one step (a rename over it).
 */
static int zf_layout_unlinks(struct thread_data *td)
{
	return td_write(td) && !td->o.overwrite && !td->o.file_append && !td->o.fill_device &&
	       !td->o.create_on_open;
}

/* zf_layout_block is the block a layout to end writes in: fio's. */
static size_t zf_layout_block(struct thread_data *td, uint64_t end)
{
	uint64_t bs = td->o.max_bs[DDIR_WRITE];

	if (!bs)
		bs = td_max_bs(td);
	return (size_t) (bs && bs < end ? bs : end);
}

/*
 * A layout sends fio's blocks in writes of whole blocks up to
 * ZF_LAYOUT_CHUNK bytes, not a round trip per block: fio --rw=randread
 * --size=64m laid its file out in 3 s in 4 KiB writes, one at a time.
 */
#define ZF_LAYOUT_CHUNK (1U << 20)

/* zf_layout_chunk is the most a layout to end writes at once. */
static size_t zf_layout_chunk(struct thread_data *td, uint64_t end)
{
	size_t bs = zf_layout_block(td, end);
	size_t chunk = bs >= ZF_LAYOUT_CHUNK ? bs : ZF_LAYOUT_CHUNK / bs * bs;

	return chunk < end ? chunk : (size_t) end;
}

/*
 * zf_write_layout writes [0, end) of the file open as h with fio's
 * buffer contents, as fio's extend_file writes a regular file (it
 * truncates it first: every byte below end is written here): each block
 * of zf_layout_block bytes filled as fio fills it, several in one write.
 * zd's region holds zf_layout_chunk bytes of data. With fill_device=1 it
 * stops at the first ENOSPC, as fio's does, the file then laid out to
 * *done bytes. Returns -errno, or 1 if fio was told to stop meanwhile
 * (td->terminate: Ctrl-C).
 */
static int zf_write_layout(struct thread_data *td, struct zf_data *zd, struct fio_file *f,
			   uint32_t h, uint64_t end, uint64_t *done)
{
	uint64_t off = 0, bs = zf_layout_block(td, end), chunk = zf_layout_chunk(td, end), i;
	int err;

	while (off < end && !td->terminate) {
		uint64_t n = end - off < chunk ? end - off : chunk;

		*done = off;
		for (i = 0; i < n; i += bs)
			fill_io_buffer(td, zd->region + i, n - i < bs ? n - i : bs, n - i < bs ? n - i : bs);
		if ((err = sync_req(zd, ZF_OP_WRITE, 0, h, off, 0, (uint32_t) n)) == -ENOSPC &&
		    td->o.fill_device)
			return 0;
		if (err < 0) {
			log_err("zonefold: lay out %s with data at %llu: %s\n", f->file_name,
				(unsigned long long) off, strerror(-err));
			return err;
		}
		if (zd->sync_val != n) {
			log_err("zonefold: lay out %s with data at %llu: %llu of %llu bytes written\n",
				f->file_name, (unsigned long long) off,
				(unsigned long long) zd->sync_val, (unsigned long long) n);
			return -EIO;
		}
		off += n;
	}
	*done = off;
	return td->terminate ? 1 : 0;
}

/*
 * zf_remove removes the daemon's file name, once no handle has it open
 * (ZF_REMOVE_UNUSED): EBUSY says another handle (any client's) has it
 * open, and the daemon removes it when the last one closes. Returns 0 or
 * -errno (-ENOENT: no such file).
 */
static int zf_remove(struct zf_data *zd, const char *name)
{
	int err = sync_call(zd, ZF_OP_REMOVE, ZF_REMOVE_UNUSED, 0, 0, name);

	if (err == -EINVAL) /* a daemon older than the flag */
		err = sync_call(zd, ZF_OP_REMOVE, 0, 0, 0, name);
	return err == -EBUSY ? 0 : err;
}

/*
 * zf_lay_out_anew gives f's name a new, empty file, as fio's extend_file
 * unlinks a regular file shorter than the job's range before it lays it
 * out ("layout unlink"), and returns its handle in *h, having closed
 * the old file's. The new file is created under a temporary name
 * (ZF_TEMP_PREFIX) and renamed over f's name: handles that have the old
 * file open, another fio process's or any other client's, keep reading
 * and writing it, data and all, until they close it, as open
 * descriptors keep an unlinked file on a kernel file system. Cutting the
 * file to 0 in place, or writing the layout over it, took those clients'
 * acknowledged writes from under their handles (a second fio process's
 * layout failed the first's verify_backlog reads, of blocks it had just
 * written through its open file, with "bad magic header 0").
 *
 * The rename is durable when answered, with the temporary's create
 * (deferred: the rename's flush covers it), so the name has the old
 * file or the new one whatever crashes when. The engine used to remove
 * the name and then create it: a kill -9 of the daemon between the two
 * left neither (TestH39bFioLayoutAnewSurvivesKill9AtEveryStep). If fio
 * dies before the rename, the daemon removes the temporary when the
 * connection ends (TestH39bFioLayoutAnewEngineDiesBeforeRename), and a
 * daemon that crashed meanwhile removes it at its start.
 *
 * A daemon whose names are full (ENOSPC) has no room for the temporary
 * beside the old file: then the name is removed and created again, as
 * before, durably (no defer-sync: with fallocate=none or keep, or
 * create_fsync=0, nothing would flush a deferred create, and a crash
 * after fio ended left neither file: TestFioLayoutAnewSurvivesKill9).
 * Setup, not the timed run, pays the flushes. Returns 0 or -errno (*h
 * then 0, everything closed).
 */
static int zf_lay_out_anew(struct zf_data *zd, struct fio_file *f, uint32_t *h)
{
	char tmp[64];
	uint32_t nh;
	int err, tries;

	for (tries = 0;; tries++) {
		zf_temp_name(tmp, sizeof(tmp));
		err = sync_call(zd, ZF_OP_OPEN, ZF_OPEN_CREATE | ZF_OPEN_EXCL | ZF_OPEN_DEFER_SYNC, 0,
				0, tmp);
		if (err == -EINVAL) /* a daemon older than defer-sync */
			err = sync_call(zd, ZF_OP_OPEN, ZF_OPEN_CREATE | ZF_OPEN_EXCL, 0, 0, tmp);
		if (err != -EEXIST || tries == 3)
			break;
	}
	if (err == -ENOSPC) {
		sync_call(zd, ZF_OP_CLOSE, 0, *h, 0, NULL);
		*h = 0;
		if ((err = sync_call(zd, ZF_OP_REMOVE, 0, 0, 0, f->file_name)) < 0 && err != -ENOENT) {
			log_err("zonefold: remove %s to lay it out anew: %s\n", f->file_name,
				strerror(-err));
			return err;
		}
		if ((err = sync_call(zd, ZF_OP_OPEN, ZF_OPEN_CREATE, 0, 0, f->file_name)) < 0) {
			log_err("zonefold: create %s to lay it out anew: %s\n", f->file_name,
				strerror(-err));
			return err;
		}
		*h = (uint32_t) zd->sync_val;
		return 0;
	}
	if (err < 0) {
		log_err("zonefold: create a temporary file to lay %s out anew: %s\n", f->file_name,
			strerror(-err));
		sync_call(zd, ZF_OP_CLOSE, 0, *h, 0, NULL);
		*h = 0;
		return err;
	}
	nh = (uint32_t) zd->sync_val;
	err = zf_rename(zd, tmp, f->file_name);
	sync_call(zd, ZF_OP_CLOSE, 0, *h, 0, NULL);
	*h = 0;
	if (err < 0) {
		log_err("zonefold: rename a temporary file over %s to lay it out anew: %s\n",
			f->file_name, strerror(-err));
		sync_call(zd, ZF_OP_CLOSE, 0, nh, 0, NULL);
		sync_call(zd, ZF_OP_REMOVE, 0, 0, 0, tmp);
		return err;
	}
	*h = nh;
	return 0;
}

/*
 * zf_batch_step sends op (with flags) for every file i of a batch of n
 * that is still ok[i] (and, with off, has a nonzero off[i], which the
 * request carries), at once, and clears ok[i] where it fails. Returns
 * what zf_batch_run does when the batch itself fails (the connection).
 */
static int zf_batch_step(struct zf_data *zd, uint8_t *reqs, uint8_t op, uint8_t flags,
			 const uint32_t *h, const uint64_t *off, int *ok, unsigned int n)
{
	unsigned int on[ZF_BATCH], m = 0, i;

	for (i = 0; i < n; i++) {
		if (ok[i] && (!off || off[i])) {
			encode_req(reqs + m * ZF_REQ_SIZE, 0, op, flags, h[i], off ? off[i] : 0, 0, 0);
			on[m++] = i;
		}
	}
	if (m && zf_batch_run(zd, reqs, m) < 0)
		return -1;
	for (i = 0; i < m; i++)
		if (zd->batch_status[i])
			ok[on[i]] = 0;
	return 0;
}

/*
 * zf_lay_out_ahead lays out f and the files after it in td->files (up
 * to ZF_BATCH, and the ring's entries) that need what a layout without
 * data does to a file that is missing or shorter than the job's range
 * (open, creating it; grow it to the range's end; fsync it if sync;
 * close it), each step's requests for all of them at once. One file at
 * a time, a layout cost four round trips to the daemon and a device
 * flush each for its grow and its fsync, which files laid out together
 * share. A file it does not finish so (one shorter than the range that
 * is laid out anew, any error) is left to its own call of
 * prepopulate_file, which lays it out alone and reports what fails, as
 * before: zd->ahead_done says which are done. A name too long for the
 * batch ends it, so that no file after one that fails is laid out (fio
 * stops at that one). Returns whether f is.
 */
static int zf_lay_out_ahead(struct thread_data *td, struct zf_data *zd, struct fio_file *f,
			    int anew, int sync)
{
	uint8_t reqs[ZF_BATCH * ZF_REQ_SIZE];
	unsigned int idx[ZF_BATCH], n = 0, m, i, j;
	unsigned int most = zd->entries < ZF_BATCH ? zd->entries : ZF_BATCH;
	uint64_t end[ZF_BATCH];
	uint32_t h[ZF_BATCH];
	int ok[ZF_BATCH], open_einval = 0;

	zd->ahead_td = NULL;
	if (f->fileno < 0 || (unsigned int) f->fileno >= td->files_index || td->files[f->fileno] != f ||
	    zd->region_len - ZF_CTL_BYTES < ZF_BATCH * ZF_NAME_ROOM)
		return 0;
	for (j = f->fileno; j < td->files_index && j - f->fileno < ZF_BATCH && n < most; j++) {
		struct fio_file *g = td->files[j];
		int len;

		end[n] = g->file_offset + g->io_size;
		if (g->io_size == -1ULL || (g->real_file_size != -1ULL && g->real_file_size >= end[n]))
			continue; /* its own call does nothing */
		len = zf_clean_name((char *) zd->region + n * ZF_NAME_ROOM, g->file_name, ZF_NAME_ROOM - 1);
		/*
		 * A name that does not fit (longer than the daemon's 255 bytes)
		 * ends the batch: its own call fails, and fio stops there
		 * before the files after it, which must not have been laid out
		 * (skipping it laid them out, fio failing the job meanwhile).
		 */
		if (len <= 0)
			break;
		encode_req(reqs + n * ZF_REQ_SIZE, 0, ZF_OP_OPEN, ZF_OPEN_CREATE | ZF_OPEN_DEFER_SYNC, 0, 0,
			   n * ZF_NAME_ROOM, (uint32_t) len);
		idx[n++] = j;
	}
	if (!n || idx[0] != (unsigned int) f->fileno || zf_batch_run(zd, reqs, n) < 0)
		return 0;
	for (i = 0; i < n; i++) {
		ok[i] = !zd->batch_status[i];
		h[i] = ok[i] ? (uint32_t) zd->batch_val[i] : 0; /* handles are 1..4096 */
		/* A daemon older than defer-sync: the files' own calls know it. */
		open_einval |= zd->batch_status[i] == EINVAL;
		/* Laid out anew by its own call (zf_lay_out_anew). */
		if (ok[i] && anew && zd->batch_val2[i] && zd->batch_val2[i] < end[i])
			ok[i] = 0;
		end[i] = ok[i] && zd->batch_val2[i] < end[i] ? end[i] : 0; /* 0: no grow */
	}
	if (zf_batch_step(zd, reqs, ZF_OP_TRUNCATE, ZF_TRUNCATE_GROW, h, end, ok, n) < 0 ||
	    (sync && zf_batch_step(zd, reqs, ZF_OP_FSYNC, 0, h, NULL, ok, n) < 0))
		return 0;
	for (m = i = 0; i < n; i++) /* every file opened */
		if (h[i])
			encode_req(reqs + m++ * ZF_REQ_SIZE, 0, ZF_OP_CLOSE, 0, h[i], 0, 0, 0);
	if (m && zf_batch_run(zd, reqs, m) < 0)
		return 0;
	zd->ahead_td = td;
	zd->ahead_from = f->fileno;
	zd->ahead_n = idx[n - 1] - f->fileno + 1;
	memset(zd->ahead_done, 0, sizeof(zd->ahead_done));
	for (i = 0; i < n && !open_einval; i++)
		zd->ahead_done[idx[i] - f->fileno] = ok[i];
	return zd->ahead_done[0];
}

/*
 * prepopulate_file lays a file out as fio lays out a regular file that
 * is shorter than the job's range [file_offset, file_offset + io_size)
 * (fio's extend_file): create it, grow it to the range's end, fsync it
 * (create_fsync=1, fio's default). fio calls it from setup_files once
 * the files are sized, before the job starts: in fio's parent (unless
 * create_serialize=0), so on the setup connection (zf_setup_take). zf_setup
 * installs it only for the jobs that need a layout there (otherwise fio
 * would print "Prepopulating IO file" for every job); a job that shares
 * the ops and needs none is left alone:
 *
 *  - create_only=1: fio runs nothing after setup; the file is what the
 *    job leaves, to be read by a later job, as on a kernel file system.
 *  - a percentage offset, zonemode=zbd or zonemode=strided
 *    (zf_sized_by_file): the file's size is known to fio (zf_setup),
 *    and a file shorter than the range is grown to it and its known
 *    size set, as fio does, so that fio's I/O past the old end is valid
 *    and a later job (offset_increment's next subjob) sees the new size.
 *  - a job that reads, or writes with overwrite=1 (zf_data_layout):
 *    fio lays out a regular file shorter than the range with data, from
 *    its start to the range's end ("Laying out IO file"), so that the
 *    job reads written blocks, or its writes overwrite written blocks;
 *    this writes the same (fio's buffer contents, in blocks of the job's
 *    largest write size) through the daemon. A grow alone would leave
 *    holes: reads of zeros the daemon never reads from its device.
 *  - any other job that writes, as fallocate= says (zf_fallocate_layout):
 *    the file is grown to the range's end, not fsynced, as fio's
 *    fallocate_file sizes a regular file.
 *  - a job that writes without overwrite=1 or file_append=1 (and
 *    fill_device=1 in a job that reads), or has a data layout: a
 *    shorter file is first replaced by an empty one, as fio unlinks it
 *    (zf_layout_unlinks, whatever fallocate= says; zf_lay_out_anew:
 *    clients that have the old file open keep it). With
 *    allow_file_create=0 the name cannot be created again: the file is
 *    cut to nothing in place (a data layout writes over it).
 *
 * Like fio's extend_file, it refuses with --readonly (and changes
 * nothing: the job then fails at open or at its first read past the
 * end) and creates nothing with allow_file_create=0.
 */
static int zf_prepopulate_file(struct thread_data *td, struct fio_file *f)
{
	struct zf_data *zd;
	uint64_t end = f->file_offset + f->io_size, size;
	int create = td->o.allow_create && !read_only;
	int layout = zf_data_layout(td);
	/*
	 * fill_device=1 in a job that reads: fio lays the file out until the
	 * device is full (without size=, the job's size is -1: no end), then
	 * sizes the job to the file.
	 */
	int fill = layout && td->o.fill_device && !td_write(td);
	int laid = td->o.create_only || zf_sized_by_file(td) || layout;
	/* The file grows to the range's end (a data layout writes it). */
	int grows = laid || zf_fallocate_layout(td);
	int anew = fill || zf_layout_unlinks(td);
	uint64_t done = 0;
	/* fio's extend_file fsyncs a layout, not an allocation alone. */
	int sync = td->o.create_fsync && laid;
	/* Laid out with the files after it (zf_lay_out_ahead). */
	int ahead = grows && !layout && create && !td->terminate;
	uint32_t h;
	int err;

	if (!grows && !anew)
		return 0;
	if (fill && f->io_size == -1ULL)
		end = UINT64_MAX;
	else if (f->io_size == -1ULL || (f->real_file_size != -1ULL && f->real_file_size >= end))
		return 0;
	if (!(zd = zf_setup_take(td, layout ? zf_layout_chunk(td, end) : ZF_BATCH * ZF_NAME_ROOM, &err))) {
		td_verror(td, -err, "zonefold connect");
		return 1;
	}
	if (ahead) {
		unsigned int k = (unsigned int) f->fileno - zd->ahead_from;

		/* Done ahead (once), or else (in the range, not done) alone. */
		if (zd->ahead_td == td && f->fileno >= 0 && k < zd->ahead_n) {
			ahead = zd->ahead_done[k];
			zd->ahead_done[k] = 0;
		} else
			ahead = zf_lay_out_ahead(td, zd, f, anew, sync);
		if (ahead) {
			if (f->real_file_size != -1ULL)
				f->real_file_size = end;
			err = 0;
			goto out;
		}
	}
	/*
	 * Only emptied, not grown (fallocate=keep or none): a file that is
	 * missing, as long as the range or longer needs nothing, and one the
	 * daemon cannot stat is left to the job's open to report, at the
	 * job's first file open rather than in fio's setup of every file.
	 */
	if (!grows && ((err = sync_call(zd, ZF_OP_STAT, 0, 0, 0, f->file_name)) < 0 ||
		       !zd->sync_val || zd->sync_val >= end)) {
		err = 0;
		goto out;
	}
	err = -EINVAL;
	if (create && (err = sync_call(zd, ZF_OP_OPEN, ZF_OPEN_CREATE | ZF_OPEN_DEFER_SYNC, 0, 0,
				       f->file_name)) == -EINVAL)
		err = sync_call(zd, ZF_OP_OPEN, ZF_OPEN_CREATE, 0, 0, f->file_name);
	else if (!create)
		err = sync_call(zd, ZF_OP_OPEN, 0, 0, 0, f->file_name);
	if (err == -ENOENT && read_only) {
		log_err("zonefold: refusing to create %s due to read-only (--readonly)\n", f->file_name);
		err = 0;
		goto out;
	}
	if (err < 0) {
		if (err == -ENOENT)
			log_err("zonefold: %s: file creation disallowed by allow_file_create=0\n",
				f->file_name);
		else
			log_err("zonefold: open %s: %s\n", f->file_name, strerror(-err));
		td_verror(td, -err, "zonefold open");
		goto out;
	}
	h = (uint32_t) zd->sync_val;
	size = zd->sync_val2;
	if (size < end && read_only) {
		log_err("zonefold: refusing extend of %s from %llu to %llu bytes due to read-only "
			"(--readonly)\n", f->file_name, (unsigned long long) size,
			(unsigned long long) end);
	} else if (size < end && (anew || layout) && size && create &&
		   (err = zf_lay_out_anew(zd, f, &h)) < 0) {
		/*
		 * fio lays the file out anew (extend_file's "layout unlink",
		 * for zf_layout_unlinks, fill_device and a data layout): on a
		 * full device, overwriting its blocks in place would find no
		 * room, and other clients that have the file open keep it.
		 */
		td_verror(td, -err, "zonefold lay out");
		goto out;
	} else if (size < end && anew && size && !create &&
		   (err = sync_call(zd, ZF_OP_TRUNCATE, 0, h, 0, NULL)) < 0) {
		/* allow_file_create=0: the name cannot be created again. */
		log_err("zonefold: truncate %s to lay it out: %s\n", f->file_name, strerror(-err));
		td_verror(td, -err, "zonefold lay out");
	} else if (size < end && layout && (err = zf_write_layout(td, zd, f, h, end, &done)) < 0) {
		td_verror(td, -err, "zonefold lay out");
	} else if (size < end && layout && err > 0) {
		/*
		 * Stopped (Ctrl-C): fio removes the file it was laying out
		 * and goes on, the job about to end ("terminate unlink").
		 */
		sync_call(zd, ZF_OP_CLOSE, 0, h, 0, NULL);
		if ((err = zf_remove(zd, f->file_name)) < 0 && err != -ENOENT)
			log_err("zonefold: remove %s, its layout stopped: %s\n", f->file_name,
				strerror(-err));
		err = 0;
		goto out;
	} else if (size < end && !layout && grows &&
		   (err = sync_call(zd, ZF_OP_TRUNCATE, ZF_TRUNCATE_GROW, h, end, NULL)) < 0) {
		log_err("zonefold: lay out %s to %llu bytes: %s\n", f->file_name,
			(unsigned long long) end, strerror(-err));
		td_verror(td, -err, "zonefold lay out");
	} else if (!read_only && sync && (err = sync_call(zd, ZF_OP_FSYNC, 0, h, 0, NULL)) < 0) {
		log_err("zonefold: fsync %s after laying it out: %s\n", f->file_name, strerror(-err));
		td_verror(td, -err, "zonefold fsync");
	} else if (fill && size < end) {
		f->real_file_size = done;
		fio_file_set_size_known(f);
		if (f->io_size > (done > f->file_offset ? done - f->file_offset : 0))
			f->io_size = done > f->file_offset ? done - f->file_offset : 0;
	} else if (!read_only && grows && f->real_file_size != -1ULL) {
		f->real_file_size = end;
	}
	sync_call(zd, ZF_OP_CLOSE, 0, h, 0, NULL);
out:
	zf_setup_keep(td, zd);
	return err < 0;
}

/*
 * setup runs before the jobs start (in fio's parent, unless
 * create_serialize=0) and sets each file's size as fio's own engines see
 * it, so that fio's sizing options mean what they mean there:
 *
 *  - size= or filesize= given: fio sizes the file from them (size= split
 *    among nrfiles, filesize= a size or a range per file), as for a file
 *    it is about to lay out. The size is left unknown (-1, as fio's nfs
 *    engine does): fio then does I/O over [offset, offset + io_size) and
 *    the daemon grows the file as fio writes; prepopulate_file lays a file out
 *    for a job that reads. A filesize= range keeps an existing file whose
 *    size is inside it, as fio does with a regular file.
 *  - neither given: the file must exist; its size is the daemon's.
 *  - but a percentage offset (offset=50%, offset_increment=25%) is a
 *    share of the file's size, which fio takes before it sizes the job
 *    (get_start_offset): of -1 it is past any file; and zonemode=zbd
 *    counts zones over it, zonemode=strided wraps at its end
 *    (zf_sized_by_file). So such a job's
 *    files have a known size, as a regular file's: the daemon's, or 0
 *    for a missing file (with size= or filesize=: fio's zbd then
 *    refuses it as smaller than a zone, as it does a missing regular
 *    file), and prepopulate_file lays each out to its range as fio lays
 *    out a regular file.
 *
 * With create_only=1 or zf_sized_by_file it installs prepopulate_file.
 */
static int zf_setup(struct thread_data *td)
{
	struct fio_file *f;
	struct zf_data *zd = NULL;
	unsigned int i;
	int err, ret = 0;
	int sized = td->o.size || td->o.file_size_low;
	int range = td->o.file_size_low && td->o.file_size_low != td->o.file_size_high;
	int by_file = zf_sized_by_file(td);
	int touches = td->o.create_only || by_file || zf_data_layout(td) || zf_fallocate_layout(td) ||
		      zf_layout_unlinks(td);

	/*
	 * A job init would refuse is refused before prepopulate_file lays
	 * out (or replaces) any of its files; its bs against the daemon's
	 * limit, which its hello gives, only if the files may be touched.
	 */
	if (zf_refused(td, 0))
		return 1;
	if (touches) {
		if (!(zd = zf_setup_take(td, ZF_BATCH * ZF_NAME_ROOM, &err))) {
			td_verror(td, -err, "zonefold connect");
			return 1;
		}
		if (zf_refused(td, zd->max_io)) {
			zf_setup_keep(td, zd);
			return 1;
		}
	}
	/*
	 * The ops are shared by every job and never cleared: a job that
	 * needs no layout returns at once from the hook. This job's own
	 * setup_files calls it after this returns.
	 */
	if (touches)
		td->io_ops->prepopulate_file = zf_prepopulate_file;
	for_each_file(td, f, i) {
		if (f->real_file_size != -1ULL)
			continue;
		if (sized && !range && !by_file)
			continue;
		/* With room for prepopulate_file's names, so that it takes this one. */
		if (!zd && !(zd = zf_setup_take(td, ZF_BATCH * ZF_NAME_ROOM, &err))) {
			ret = 1;
			break;
		}
		err = sync_call(zd, ZF_OP_STAT, 0, 0, 0, f->file_name);
		if (err == -ENOENT && sized && by_file) {
			f->real_file_size = 0;
			fio_file_set_size_known(f);
			continue;
		}
		if (err == -ENOENT && sized)
			continue;
		if (err < 0) {
			if (err == -ENOENT && td->o.size_percent)
				log_err("zonefold: %s does not exist, and size=%u%% is a share of an "
					"existing file's size (give size= in bytes to create it)\n",
					f->file_name, td->o.size_percent);
			else if (err == -ENOENT)
				log_err("zonefold: %s does not exist, and the job gives neither size= nor filesize=\n",
					f->file_name);
			else
				log_err("zonefold: stat %s: %s\n", f->file_name, strerror(-err));
			ret = 1;
			break;
		}
		if (range && !by_file &&
		    (zd->sync_val < td->o.file_size_low || zd->sync_val > td->o.file_size_high))
			continue;
		f->real_file_size = zd->sync_val;
		fio_file_set_size_known(f);
	}
	zf_setup_keep(td, zd);
	return ret;
}

/*
 * zf_is_pre_read says whether fio opens f to pre-read it (pre_read=1):
 * fio's pre_read_files opens each of the job's files in turn, in their
 * order, through the engine's open_file, before the job's first I/O
 * and its first open of a file for I/O.
 */
static int zf_is_pre_read(struct thread_data *td, struct zf_data *zd, struct fio_file *f)
{
	if (!td->o.pre_read || zd->pre_read_next >= td->files_index ||
	    td->files[zd->pre_read_next] != f)
		return 0;
	zd->pre_read_next++;
	return 1;
}

/*
 * zf_pre_read does what fio's pre_read=1 does for a regular file before
 * the job's timed run: it reads the job's range of f,
 * [file_offset, file_offset + io_size), so that the job's reads find it
 * cached, here in the daemon's cache. fio's pre_read_file then lseeks
 * and reads f->fd itself, which an engine with no local file has not
 * got ("failed to lseek pre-read file: Bad file descriptor"): having
 * read the file through the daemon, this gives fio /dev/zero to read
 * (closed at close_file), so fio's own loop reads as much and finds no
 * error. The reads take a connection of their own, as a layout does:
 * the job's region holds fio's buffers, whose contents fio fills once
 * for some jobs (buffer_pattern=, zero_buffers) and must keep. A read
 * that comes back short fails the job with EIO, as fio's pre-read
 * fails it on a kernel file system. Returns 0 or -errno.
 */
static int zf_pre_read(struct thread_data *td, struct fio_file *f)
{
	uint64_t off = f->file_offset, end = f->file_offset + f->io_size;
	size_t chunk = ZF_LAYOUT_CHUNK;
	struct zf_data *zd;
	uint32_t h;
	int err, fd;

	zd = calloc(1, sizeof(*zd));
	if (!zd)
		return -ENOMEM;
	zd->fd = -1;
	if ((err = zf_connect(td, zd, chunk)) < 0)
		goto out;
	/* Handles are a connection's: open f on this one. */
	if ((err = sync_call(zd, ZF_OP_OPEN, 0, 0, 0, f->file_name)) < 0) {
		log_err("zonefold: pre_read: open %s: %s\n", f->file_name, strerror(-err));
		goto out;
	}
	h = (uint32_t) zd->sync_val;
	while (off < end && !td->terminate) {
		uint32_t n = end - off < chunk ? (uint32_t) (end - off) : (uint32_t) chunk;

		if ((err = sync_req(zd, ZF_OP_READ, 0, h, off, 0, n)) < 0) {
			log_err("zonefold: pre_read %s at %llu: %s\n", f->file_name,
				(unsigned long long) off, strerror(-err));
			break;
		}
		if (zd->sync_val != n) {
			log_err("zonefold: pre_read %s at %llu: %llu of %u bytes: the file is "
				"shorter than the job's range\n", f->file_name, (unsigned long long) off,
				(unsigned long long) zd->sync_val, n);
			err = -EIO;
			break;
		}
		off += n;
	}
	sync_call(zd, ZF_OP_CLOSE, 0, h, 0, NULL);
	if (err < 0)
		goto out;
	if (f->fd >= 0)
		close(f->fd); /* fsync_on_close's memfd: fio's pre-read closes f again */
	if ((fd = open("/dev/zero", O_RDONLY | O_CLOEXEC)) < 0) {
		err = -errno;
		f->fd = -1;
		log_err("zonefold: pre_read: open /dev/zero for fio to read: %s\n", strerror(-err));
		goto out;
	}
	f->fd = fd;
out:
	zf_free(zd);
	return err;
}

/*
 * open_file opens the file, creating it if missing for a job that
 * writes or with create_on_open=1, as fio's own open does (a job that
 * only reads finds it created by its layout, or fails with ENOENT if it
 * has gone since: unlink_each_loop=1). A job that reads finds it laid
 * out with data to the end of its range (prepopulate_file), unless
 * another client cut it meanwhile: then it is grown here (grow only),
 * since reads past the end would return nothing. With create_on_open=1
 * fio lays nothing out and neither does this: the job reads the file as
 * it is, and a read past its end fails with EIO (complete), as fio's
 * psync fails it on a kernel file system.
 *
 * fio --readonly (fio's global read_only) changes no file, as with fio's
 * own engines: the file is opened without creating it (a missing file
 * fails the job with ENOENT), and a reading job whose range passes the
 * file's end is refused ("refusing extend ... due to read-only") rather
 * than laid out. allow_file_create=0 opens without creating too: a
 * missing file fails the job ("file creation disallowed"), as fio fails
 * such a job on a kernel file system.
 */
static int zf_open_file(struct thread_data *td, struct fio_file *f)
{
	struct zf_data *zd = td->io_ops_data;
	uint64_t end = f->file_offset + f->io_size;
	/* fio's open(2) flags: O_CREAT for a job that writes, or with create_on_open=1. */
	int create = td->o.allow_create && !read_only && (td_write(td) || td->o.create_on_open);
	uint32_t h;
	int err;

	zf_setup_drop(0); /* the job's setup is done (create_serialize=0: its own) */
	/*
	 * A file fio creates is durable from its fsync (end_fsync, fsync=N,
	 * sync=1, fsync_on_close), as with open(2)'s O_CREAT on a kernel file
	 * system, not when the open returns: without ZF_OPEN_DEFER_SYNC each
	 * create waits for a flush of the daemon's metadata log, inside the
	 * job's timed run (fio opens files lazily). A daemon older than the
	 * flag answers EINVAL: open as it knows how.
	 */
	err = -EINVAL;
	if (!create)
		err = sync_call(zd, ZF_OP_OPEN, 0, 0, 0, f->file_name);
	else if (!zd->durable_creates &&
		 (err = sync_call(zd, ZF_OP_OPEN, ZF_OPEN_CREATE | ZF_OPEN_DEFER_SYNC, 0, 0, f->file_name)) == -EINVAL)
		zd->durable_creates = 1;
	if (err == -EINVAL && create)
		err = sync_call(zd, ZF_OP_OPEN, ZF_OPEN_CREATE, 0, 0, f->file_name);
	if (err < 0) {
		if (err == -ENOENT && !td->o.allow_create && !read_only)
			log_err("zonefold: open %s: file creation disallowed by allow_file_create=0\n",
				f->file_name);
		else
			log_err("zonefold: open %s: %s\n", f->file_name, strerror(-err));
		td_verror(td, -err, "zonefold open");
		return 1;
	}
	h = (uint32_t) zd->sync_val;
	FILE_SET_ENG_DATA(f, (void *) (uintptr_t) h);
	/*
	 * fsync_on_close: fio calls fsync(f->fd) itself before close_file,
	 * and fails the job on its EBADF; give it an empty memfd to sync
	 * (a no-op) and sync the file in close_file. Only when close_file
	 * will sync: fio's own fsync is gated the same way.
	 */
	if (td->o.fsync_on_close && (td_write(td) || td->o.override_sync) &&
	    (f->fd = memfd_create("zonefold-fsync", MFD_CLOEXEC)) < 0) {
		err = -errno;
		f->fd = -1;
		td_verror(td, -err, "zonefold memfd");
		goto fail;
	}
	/*
	 * create_on_open=1: fio lays nothing out, and a kernel file system's
	 * file stays as short as it is; reads past its end fail (complete).
	 */
	if (td_read(td) && !td->o.create_on_open && f->io_size != -1ULL && zd->sync_val2 < end) {
		if (read_only) {
			/* As fio's own engines: reads past the end would come back short. */
			log_err("zonefold: refusing extend of %s from %llu to %llu bytes due to "
				"read-only (--readonly)\n", f->file_name,
				(unsigned long long) zd->sync_val2, (unsigned long long) end);
			err = -EROFS;
			td_verror(td, EROFS, "zonefold read-only");
			goto fail;
		}
		/* Grow only: another job may have written past end since open. */
		if ((err = sync_call(zd, ZF_OP_TRUNCATE, ZF_TRUNCATE_GROW, h, end, NULL)) < 0) {
			log_err("zonefold: lay out %s to %llu bytes: %s\n", f->file_name,
				(unsigned long long) end, strerror(-err));
			if (err == -EINVAL)
				log_err("zonefold: is the daemon too old for the grow-only truncate flag? "
					"(docs/protocol.md)\n");
			td_verror(td, -err, "zonefold lay out");
			goto fail;
		}
	}
	if (zf_is_pre_read(td, zd, f) && (err = zf_pre_read(td, f)) < 0) {
		td_verror(td, -err, "zonefold pre_read");
		goto fail;
	}
	return 0;
fail:
	/*
	 * fio requires f->fd == -1 after a failed open and never calls
	 * close_file for it: close everything open_file opened.
	 */
	if (f->fd >= 0) {
		close(f->fd);
		f->fd = -1;
	}
	sync_call(zd, ZF_OP_CLOSE, 0, h, 0, NULL);
	FILE_SET_ENG_DATA(f, NULL);
	return 1;
}

/*
 * unlink_file removes the daemon's file, for unlink=1 and
 * unlink_each_loop=1. Without this hook fio unlink(2)s the file's name in
 * its working directory: a local file that is not the job's, which fio
 * would delete while the daemon's file stayed. Returns 0 or an errno, as
 * fio's own unlink does.
 */
static int zf_unlink_file(struct thread_data *td, struct fio_file *f)
{
	struct zf_data *zd = td->io_ops_data;
	int err;

	if (!zd || zd->fd < 0) {
		log_err("zonefold: unlink %s: not connected to the daemon\n", f->file_name);
		return ENOTCONN;
	}
	/*
	 * Only a file no handle has open: jobs sharing a file (numjobs with
	 * one filename) each unlink it at their end, and a job still
	 * writing would otherwise find its open file gone (ENOENT) where a
	 * kernel file system keeps an unlinked file for its open
	 * descriptors. EBUSY says another handle (any client's) has it
	 * open: the daemon removes it when the last one closes; another job
	 * removing it first is ENOENT, as before.
	 */
	if ((err = zf_remove(zd, f->file_name)) < 0) {
		if (err != -ENOENT)
			log_err("zonefold: unlink %s: %s\n", f->file_name, strerror(-err));
		return -err;
	}
	return 0;
}

static int zf_close_file(struct thread_data *td, struct fio_file *f)
{
	struct zf_data *zd = td->io_ops_data;
	uint32_t h = (uint32_t) (uintptr_t) FILE_ENG_DATA(f);
	int err = 0, cerr;

	if (zd && zd->fd >= 0 && h) {
		/* fsync_on_close: the file is durable once closed. */
		if (td->o.fsync_on_close && (td_write(td) || td->o.override_sync) &&
		    (err = sync_call(zd, ZF_OP_FSYNC, 0, h, 0, NULL)) < 0) {
			/* fio ignores close_file's return: the job must carry the error. */
			log_err("zonefold: fsync %s at close: %s\n", f->file_name, strerror(-err));
			td_verror(td, -err, "zonefold fsync_on_close");
		}
		cerr = sync_call(zd, ZF_OP_CLOSE, 0, h, 0, NULL);
		if (!err)
			err = cerr;
	}
	if (f->fd >= 0) {
		close(f->fd);
		f->fd = -1;
	}
	FILE_SET_ENG_DATA(f, NULL);
	return err < 0 ? -err : 0;
}

static enum fio_q_status zf_queue(struct thread_data *td, struct io_u *io_u)
{
	struct zf_data *zd = td->io_ops_data;
	uint32_t h = (uint32_t) (uintptr_t) FILE_ENG_DATA(io_u->file);
	uint8_t op;
	uint64_t addr = 0;
	uint32_t len = 0, slot;

	fio_ro_check(td, io_u);
	if (zd->dead) {
		io_u->error = zd->dead;
		return FIO_Q_COMPLETED;
	}
	if (zd->npending + zd->inflight + zd->done_count >= zd->done_cap)
		return FIO_Q_BUSY;
	switch (io_u->ddir) {
	case DDIR_READ:
	case DDIR_WRITE:
		op = io_u->ddir == DDIR_READ ? ZF_OP_READ : ZF_OP_WRITE;
		addr = (uint8_t *) io_u->xfer_buf - zd->region;
		len = io_u->xfer_buflen;
		if ((uint8_t *) io_u->xfer_buf < zd->region ||
		    addr + len > zd->region_len - ZF_CTL_BYTES) {
			io_u->error = EFAULT; /* not a buffer of ours */
			return FIO_Q_COMPLETED;
		}
		if (len > zd->max_io) {
			io_u->error = E2BIG;
			return FIO_Q_COMPLETED;
		}
		break;
	case DDIR_SYNC:
	case DDIR_DATASYNC:
		op = ZF_OP_FSYNC;
		break;
	default:
		io_u->error = EOPNOTSUPP;
		return FIO_Q_COMPLETED;
	}
	/* Slots in use are npending + inflight < done_cap: one is free. */
	slot = zd->free_slots[--zd->nfree];
	zd->slots[slot] = io_u;
	zd->slot_state[slot] = ZF_SLOT_IO;
	zd->slot_gen[slot]++;
	encode_req(zd->sbuf + zd->npending * ZF_REQ_SIZE,
		   (uint64_t) zd->slot_gen[slot] << 32 | ((uint64_t) slot + 1) << 1, op, 0, h,
		   io_u->offset, addr, len);
	zd->pending[zd->npending++] = io_u;
	return FIO_Q_QUEUED;
}

/*
 * gone fails what is in flight once a doorbell found the daemon gone,
 * after taking the replies it published before it went: those requests
 * ran, and a write's or an fsync's success must reach fio as such, not
 * as the connection's end. A failure to take them (a sync=1 write's
 * fsync that cannot be sent) leaves them to abandon too.
 */
static void gone(struct zf_data *zd, int err)
{
	if (!zd->dead)
		reap(zd);
	abandon(zd, err);
}

static int zf_commit(struct thread_data *td)
{
	struct zf_data *zd = td->io_ops_data;
	unsigned int i;
	int err;

	if (!zd->npending)
		return 0;
	err = zd->dead ? -zd->dead : publish(zd, zd->sbuf, zd->npending);
	io_u_mark_submit(td, zd->npending);
	for (i = 0; i < zd->npending; i++)
		io_u_queued(td, zd->pending[i]);
	zd->inflight += zd->npending;
	zd->npending = 0;
	if (err < 0) {
		/* Queued all the same: getevents hands them back, failed. */
		td_verror(td, -err, "zonefold doorbell");
		gone(zd, -err);
		return err;
	}
	return 0;
}

static int zf_getevents(struct thread_data *td, unsigned int min, unsigned int max,
			const struct timespec *t)
{
	struct zf_data *zd = td->io_ops_data;
	unsigned int n = 0;
	uint64_t deadline = t ? now_ns() + (uint64_t) t->tv_sec * 1000000000ULL + t->tv_nsec : 0;
	int err, ms = -1;

	while (n < max) {
		if (zd->done_count) {
			struct io_u *io_u = zd->done[zd->done_head];

			/*
			 * fio drops the error of a sync io_u an engine completes
			 * (io_completed returns before its error handling), so a
			 * failed end_fsync or fsync=N would pass: fail the job.
			 */
			if (ddir_sync(io_u->ddir) && io_u->error)
				td_verror(td, io_u->error, "zonefold fsync");
			zd->events[n++] = io_u;
			zd->done_head = (zd->done_head + 1) % zd->done_cap;
			zd->done_count--;
			continue;
		}
		if (!zd->inflight)
			break;
		if ((err = reap(zd)) < 0) {
			td_verror(td, -err, "zonefold reap");
			abandon(zd, -err);
			continue; /* hand back what failed */
		}
		if (err > 0)
			continue;
		/* Wait only until min are reaped; then take what is ready. */
		if (n >= min)
			break;
		if (t) {
			uint64_t now = now_ns();

			if (now >= deadline)
				break;
			ms = (deadline - now + 999999) / 1000000;
		}
		/*
		 * Sleep until the replies that complete min are there (at most
		 * what is in flight): the daemon wakes us once, not per reply.
		 * A sync=1 write needs two replies; waking after one is early,
		 * never late.
		 */
		if ((err = wait_replies(zd, ms, min - n < zd->inflight ? min - n : zd->inflight)) < 0) {
			td_verror(td, -err, "zonefold wait");
			abandon(zd, -err);
		}
	}
	return n;
}

static struct io_u *zf_event(struct thread_data *td, int event)
{
	struct zf_data *zd = td->io_ops_data;

	return zd->events[event];
}

struct ioengine_ops ioengine = {
	.name = "zonefold",
	.version = FIO_IOOPS_VERSION,
	/*
	 * Not FIO_NOEXTEND: the daemon extends files, and fio uses the flag
	 * only to refuse file_append=1 (and in extend_file, which it never
	 * calls for FIO_DISKLESSIO).
	 */
	.flags = FIO_DISKLESSIO | FIO_NODISKUTIL,
	.setup = zf_setup,
	.init = zf_init,
	.cleanup = zf_cleanup,
	.queue = zf_queue,
	.commit = zf_commit,
	.getevents = zf_getevents,
	.event = zf_event,
	.open_file = zf_open_file,
	.close_file = zf_close_file,
	.unlink_file = zf_unlink_file,
	.iomem_alloc = zf_iomem_alloc,
	.iomem_free = zf_iomem_free,
	.options = options,
	.option_struct_size = sizeof(struct zf_options),
};
