#ifndef ORC_IO_H
#define ORC_IO_H
#include <stddef.h>

/* write(2) all of data, retrying on EINTR and short writes: 0, or -1 with
 * errno set. */
int orc_write_all(int fd, const void *data, size_t n);
#endif
