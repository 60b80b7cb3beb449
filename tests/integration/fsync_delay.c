/* LD_PRELOAD shim for the chunk oracle: every fsync and fdatasync of the server sleeps first.

   Under group commit a transaction reaches the binlog, the binlog is synced (sync_binlog=1), and only
   then does the storage engine make its rows visible. A slow sync widens that window, which is where
   a low watermark taken from the status command loses a transaction; the oracle runs the chunk reader
   inside that window on purpose. BINLAKE_FSYNC_DELAY_US sets the sleep (default 3000 microseconds). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

static useconds_t delay_us(void) {
    static long delay = -1;
    if (delay < 0) {
        const char *text = getenv("BINLAKE_FSYNC_DELAY_US");
        delay = text ? atol(text) : 3000;
    }
    return (useconds_t)delay;
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    usleep(delay_us());
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    usleep(delay_us());
    return real(fd);
}
