"""The cffi definition of the libfabric shim: declarations (``CDEF``) and C source (``SOURCE``).

libfabric's object calls (``fi_domain``, ``fi_endpoint``, ``fi_mr_reg``, ``fi_read``,
``fi_cq_read``, ...) are ``static inline`` functions in its headers that jump through
per-object operation tables, so no shared library exports them: they only exist once
compiled. The shim is therefore an API-mode cffi extension built against
``libfabric-dev`` (see :mod:`dataio.rdma._build`). Structs are declared with ``...;`` so
the compiler, not this file, decides their layout.

Two helpers are written in C because they loop per chunk or per event and must not hold
the GIL: ``dio_transfer`` (the pipelined read/write loop) and ``dio_progress`` (the
server's progress loop). cffi releases the GIL around every call.
"""

from __future__ import annotations

__all__ = ["CDEF", "SOURCE"]

# One transfer's state, shared by the declarations and the C source.
_XFER = r"""
struct dio_xfer {
    struct fid_ep *ep;
    struct fid_cq *cq;
    fi_addr_t peer;
    int is_write;
    char *local;
    void *desc;
    size_t length;
    uint64_t remote_addr;
    uint64_t key;
    size_t chunk;
    int inflight;
    struct fi_context2 *contexts;
    uint64_t flags;
    int timeout_ms;
    int alive_fd;
    struct fid_fabric *fabric;
    int wait_fd;
    size_t done;
    int posted;
    int prov_errno;
    char message[256];
};
"""

CDEF = r"""
typedef uint64_t fi_addr_t;

struct fid { size_t fclass; ...; };
struct fid_fabric { struct fid fid; ...; };
struct fid_domain { struct fid fid; ...; };
struct fid_ep { struct fid fid; ...; };
struct fid_av { struct fid fid; ...; };
struct fid_cq { struct fid fid; ...; };
struct fid_mr { struct fid fid; ...; };
struct fi_context2 { ...; };

enum fi_ep_type { FI_EP_UNSPEC, FI_EP_MSG, FI_EP_DGRAM, FI_EP_RDM, ... };
enum fi_threading { FI_THREAD_UNSPEC, FI_THREAD_SAFE, FI_THREAD_DOMAIN, ... };
enum fi_progress { FI_PROGRESS_UNSPEC, FI_PROGRESS_AUTO, FI_PROGRESS_MANUAL, ... };
enum fi_av_type { FI_AV_UNSPEC, FI_AV_MAP, FI_AV_TABLE, ... };
enum fi_cq_format { FI_CQ_FORMAT_UNSPEC, FI_CQ_FORMAT_CONTEXT, ... };
enum fi_wait_obj { FI_WAIT_NONE, FI_WAIT_UNSPEC, FI_WAIT_FD, ... };
enum fi_hmem_iface { FI_HMEM_SYSTEM, FI_HMEM_CUDA, ... };

struct fi_tx_attr { uint64_t caps; uint64_t mode; uint64_t op_flags; size_t size;
                    size_t iov_limit; size_t rma_iov_limit; ...; };
struct fi_rx_attr { uint64_t caps; uint64_t mode; uint64_t op_flags; size_t size; ...; };
struct fi_ep_attr { enum fi_ep_type type; size_t max_msg_size; ...; };
struct fi_domain_attr { char *name; enum fi_threading threading;
                        enum fi_progress control_progress; enum fi_progress data_progress;
                        enum fi_av_type av_type; int mr_mode; size_t mr_key_size;
                        size_t mr_iov_limit; ...; };
struct fi_fabric_attr { char *name; char *prov_name; uint32_t prov_version;
                        uint32_t api_version; ...; };
struct fi_info { struct fi_info *next; uint64_t caps; uint64_t mode; uint32_t addr_format;
                 struct fi_tx_attr *tx_attr; struct fi_rx_attr *rx_attr;
                 struct fi_ep_attr *ep_attr; struct fi_domain_attr *domain_attr;
                 struct fi_fabric_attr *fabric_attr; ...; };
struct fi_av_attr { enum fi_av_type type; size_t count; ...; };
struct fi_cq_attr { size_t size; enum fi_cq_format format; enum fi_wait_obj wait_obj; ...; };
struct iovec { void *iov_base; size_t iov_len; };
struct fi_mr_attr { const struct iovec *mr_iov; size_t iov_count; uint64_t access;
                    uint64_t offset; uint64_t requested_key; enum fi_hmem_iface iface; ...; };

#define FI_RMA ...
#define FI_READ ...
#define FI_WRITE ...
#define FI_REMOTE_READ ...
#define FI_REMOTE_WRITE ...
#define FI_HMEM ...
#define FI_SOURCE ...
#define FI_COMPLETION ...
#define FI_DELIVERY_COMPLETE ...
#define FI_TRANSMIT ...
#define FI_RECV ...
#define FI_CONTEXT ...
#define FI_CONTEXT2 ...
#define FI_MR_LOCAL ...
#define FI_MR_RAW ...
#define FI_MR_VIRT_ADDR ...
#define FI_MR_ALLOCATED ...
#define FI_MR_PROV_KEY ...
#define FI_MR_MMU_NOTIFY ...
#define FI_MR_RMA_EVENT ...
#define FI_MR_ENDPOINT ...
#define FI_MR_HMEM ...
#define FI_MR_BASIC ...
#define FI_MR_SCALABLE ...
#define FI_SOCKADDR_IN ...
#define FI_SOCKADDR_IN6 ...
#define FI_ENODATA ...
#define FI_EAGAIN ...
#define FI_EAVAIL ...
#define FI_ETIMEDOUT ...
#define FI_ECONNRESET ...
#define FI_ECANCELED ...
#define FI_GETWAIT ...

uint32_t fi_version(void);
uint32_t dio_header_version(void);
int fi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
               const struct fi_info *hints, struct fi_info **info);
void fi_freeinfo(struct fi_info *info);
struct fi_info *fi_allocinfo(void);
struct fi_info *fi_dupinfo(const struct fi_info *info);
const char *fi_strerror(int errnum);

int fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
int fi_domain(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **domain,
              void *context);
int fi_endpoint(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep,
                void *context);
int fi_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av,
               void *context);
int fi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq,
               void *context);
int fi_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags);
int fi_enable(struct fid_ep *ep);
int fi_getname(struct fid *fid, void *addr, size_t *addrlen);
int fi_av_insert(struct fid_av *av, const void *addr, size_t count, fi_addr_t *fi_addr,
                 uint64_t flags, void *context);
int fi_mr_reg(struct fid_domain *domain, const void *buf, size_t len, uint64_t access,
              uint64_t offset, uint64_t requested_key, uint64_t flags, struct fid_mr **mr,
              void *context);
int fi_mr_regattr(struct fid_domain *domain, const struct fi_mr_attr *attr, uint64_t flags,
                  struct fid_mr **mr);
int fi_mr_bind(struct fid_mr *mr, struct fid *bfid, uint64_t flags);
int fi_mr_enable(struct fid_mr *mr);
uint64_t fi_mr_key(struct fid_mr *mr);
void *fi_mr_desc(struct fid_mr *mr);
int fi_close(struct fid *fid);
int fi_control(struct fid *fid, int command, void *arg);

int dio_set_provider(struct fi_info *hints, const char *name);
int dio_set_cuda_device(struct fi_mr_attr *attr, int device);

@XFER@
int dio_transfer(struct dio_xfer *x);
int dio_progress(struct fid_fabric *fabric, struct fid_cq *cq, int wait_fd, int duration_ms,
                 volatile int *stop);
"""

SOURCE = r"""
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#if FI_MAJOR_VERSION < 1 || (FI_MAJOR_VERSION == 1 && FI_MINOR_VERSION < 9)
#error "dataio.rdma needs libfabric headers >= 1.9 (FI_HMEM, fi_mr_regattr iface)"
#endif

static uint32_t dio_header_version(void)
{
    return FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
}

/* fi_freeinfo frees prov_name, so it must come from malloc. */
static int dio_set_provider(struct fi_info *hints, const char *name)
{
    free(hints->fabric_attr->prov_name);
    hints->fabric_attr->prov_name = NULL;
    if (name == NULL)
        return 0;
    hints->fabric_attr->prov_name = strdup(name);
    return hints->fabric_attr->prov_name ? 0 : -FI_ENOMEM;
}

static int dio_set_cuda_device(struct fi_mr_attr *attr, int device)
{
    attr->iface = FI_HMEM_CUDA;
    attr->device.cuda = device;
    return 0;
}

@XFER@

static double dio_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The side channel carries nothing after the handshake, so a readable socket means the
   server closed it (EOF) or reset it. */
static int dio_peer_gone(int fd)
{
    struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
    char c;
    if (fd < 0 || poll(&p, 1, 0) <= 0)
        return 0;
    if (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL))
        return 1;
    return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Sleep until the CQ's wait fd signals or timeout_ms passes; fi_trywait first makes sure
   nothing is pending that the fd would not announce. */
static void dio_wait(struct fid_fabric *fabric, struct fid_cq *cq, int fd, int timeout_ms)
{
    struct fid *fids[1] = {&cq->fid};
    struct pollfd p = {fd, POLLIN, 0};
    if (fi_trywait(fabric, fids, 1) == FI_SUCCESS)
        poll(&p, 1, timeout_ms);
}

static ssize_t dio_post(struct dio_xfer *x, int slot, size_t offset, size_t len)
{
    struct iovec iov = {x->local + offset, len};
    struct fi_rma_iov rma = {x->remote_addr + offset, len, x->key};
    struct fi_msg_rma msg;
    void *desc = x->desc;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.desc = &desc;
    msg.iov_count = 1;
    msg.addr = x->peer;
    msg.rma_iov = &rma;
    msg.rma_iov_count = 1;
    msg.context = &x->contexts[slot];
    if (x->is_write)
        return fi_writemsg(x->ep, &msg, x->flags);
    return fi_readmsg(x->ep, &msg, x->flags);
}

/* Move x->length bytes in x->chunk segments with at most x->inflight posted at once.
   Returns 0 or a negative fi_errno; x->done counts completed bytes, x->posted the
   operations still posted when it gave up, x->message says why. x->timeout_ms bounds
   the wait for the next completion, not the whole transfer. With a wait fd (x->wait_fd)
   idle time sleeps in poll() instead of spinning. */
static int dio_transfer(struct dio_xfer *x)
{
    struct fi_cq_entry entries[16];
    size_t offsets[x->inflight], lengths[x->inflight];
    int free_slots[x->inflight];
    int nfree = x->inflight, i;
    size_t next = 0;
    unsigned idle = 0;
    double now = dio_now_ms(), last_progress = now, last_check = now;

    for (i = 0; i < x->inflight; i++)
        free_slots[i] = x->inflight - 1 - i;
    x->done = 0;
    x->posted = 0;
    x->prov_errno = 0;
    x->message[0] = 0;
    while (x->done < x->length) {
        while (nfree > 0 && next < x->length) {
            int slot = free_slots[nfree - 1];
            size_t len = x->length - next < x->chunk ? x->length - next : x->chunk;
            ssize_t ret = dio_post(x, slot, next, len);
            if (ret == -FI_EAGAIN)
                break;
            if (ret) {
                snprintf(x->message, sizeof x->message, "posting %s of %zu bytes at %zu: %s",
                         x->is_write ? "fi_writemsg" : "fi_readmsg", len, next,
                         fi_strerror((int)-ret));
                return (int)ret;
            }
            offsets[slot] = next;
            lengths[slot] = len;
            next += len;
            nfree--;
            x->posted++;
        }
        ssize_t n = fi_cq_read(x->cq, entries, 16);
        if (n > 0) {
            for (i = 0; i < n; i++) {
                int slot = (int)((struct fi_context2 *)entries[i].op_context - x->contexts);
                x->done += lengths[slot];
                free_slots[nfree++] = slot;
                x->posted--;
            }
            idle = 0;
            last_progress = dio_now_ms();
            continue;
        }
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry err;
            char buf[128];
            memset(&err, 0, sizeof err);
            if (fi_cq_readerr(x->cq, &err, 0) > 0) {
                int slot = (int)((struct fi_context2 *)err.op_context - x->contexts);
                x->posted--;
                x->prov_errno = err.prov_errno;
                snprintf(x->message, sizeof x->message, "%s of %zu bytes at %zu failed: %s (%s)",
                         x->is_write ? "write" : "read", lengths[slot], offsets[slot],
                         fi_strerror(err.err),
                         fi_cq_strerror(x->cq, err.prov_errno, err.err_data, buf, sizeof buf));
                return -(err.err ? err.err : FI_EIO);
            }
            continue;
        }
        if (n != -FI_EAGAIN) {
            snprintf(x->message, sizeof x->message, "fi_cq_read: %s", fi_strerror((int)-n));
            return (int)n;
        }
        /* Spin a little first: some providers (sockets) never signal the wait fd, and a
           completion usually follows within tens of microseconds on a busy path. */
        ++idle;
        if (x->wait_fd >= 0 && idle > 64)
            dio_wait(x->fabric, x->cq, x->wait_fd, 1);
        else if (idle % 16) {
            sched_yield();
            continue;
        }
        now = dio_now_ms();
        if (now - last_check >= 5.0) {
            last_check = now;
            if (dio_peer_gone(x->alive_fd)) {
                snprintf(x->message, sizeof x->message,
                         "the server closed the connection with %zu of %zu bytes done",
                         x->done, x->length);
                return -FI_ECONNRESET;
            }
        }
        if (now - last_progress > x->timeout_ms) {
            snprintf(x->message, sizeof x->message,
                     "no completion for %d ms (%zu of %zu bytes done)", x->timeout_ms,
                     x->done, x->length);
            return -FI_ETIMEDOUT;
        }
    }
    return 0;
}

/* Drive a server endpoint's progress for about duration_ms, or until *stop is set.
   Software providers move target-side data only while someone reads the CQ, though the
   target itself sees no completions. With a wait fd the thread sleeps between events;
   without one it polls and naps briefly. */
static int dio_progress(struct fid_fabric *fabric, struct fid_cq *cq, int wait_fd,
                        int duration_ms, volatile int *stop)
{
    struct fi_cq_entry entries[16];
    struct timespec nap = {0, 20000};
    double end = dio_now_ms() + duration_ms;
    unsigned spins = 0;
    while (!*stop) {
        ssize_t n = fi_cq_read(cq, entries, 16);
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry err;
            memset(&err, 0, sizeof err);
            fi_cq_readerr(cq, &err, 0);
        }
        if (wait_fd >= 0) {
            if (n == -FI_EAGAIN)
                dio_wait(fabric, cq, wait_fd, 10);
            if (dio_now_ms() > end)
                break;
        } else if (++spins % 64 == 0) {
            if (dio_now_ms() > end)
                break;
            nanosleep(&nap, NULL);
        }
    }
    return 0;
}
"""

CDEF = CDEF.replace("@XFER@", _XFER.strip())
SOURCE = SOURCE.replace("@XFER@", _XFER.strip())
