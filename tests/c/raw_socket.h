/* Raw SEQPACKET sends and receives with descriptors attached, for the
 * tests and the fuzz targets that play a peer by hand. No dependency on the
 * test harness, so the fuzz targets can use it too. */
#ifndef ASCEND_IPC_TEST_RAW_SOCKET_H_
#define ASCEND_IPC_TEST_RAW_SOCKET_H_

#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Sends one packet with nfds (at most 4) descriptors attached. Returns send's result. */
static inline ssize_t raw_send_fds(int sock, const void *b, size_t n, const int *fds, int nfds) {
  struct iovec iov = {(void *)b, n};
  struct msghdr mh;
  memset(&mh, 0, sizeof mh);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  union {
    char buf[CMSG_SPACE(4 * sizeof(int))];
    struct cmsghdr a;
  } ctl;
  if (nfds > 0) {
    memset(&ctl, 0, sizeof ctl);
    mh.msg_control = ctl.buf;
    mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
  }
  return sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Sends one packet, with descriptor fd attached when fd >= 0. */
static inline ssize_t raw_send(int sock, const void *b, size_t n, int fd) {
  return raw_send_fds(sock, b, n, &fd, fd >= 0);
}

/* Receives one packet into b (cap bytes); the descriptors that came with it
 * go to fds (up to 4, *nfd of them; the rest are closed). Returns recvmsg's
 * result. */
static inline ssize_t raw_recv(int sock, uint8_t *b, size_t cap, int *fds, int *nfd, int flags) {
  union {
    char buf[CMSG_SPACE(sizeof(int) * 8)];
    struct cmsghdr a;
  } ctl;
  struct iovec iov = {b, cap};
  struct msghdr mh;
  memset(&mh, 0, sizeof mh);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctl.buf;
  mh.msg_controllen = sizeof ctl.buf;
  ssize_t r = recvmsg(sock, &mh, flags | MSG_CMSG_CLOEXEC);
  *nfd = 0;
  if (r < 0) return r;
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; i++) {
      int f;
      memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof f);
      if (fds && *nfd < 4) fds[(*nfd)++] = f; else close(f);
    }
  }
  return r;
}

#endif
