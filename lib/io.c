#include "io.h"

#include <errno.h>
#include <unistd.h>

int orc_write_all(int fd, const void *data, size_t n)
{
	const char *p = data;
	ssize_t w;

	while (n) {
		w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}
