/* Copying one tar entry's data between libarchive handles (archive_copy.h). */
#include "archive_copy.h"

int orc_archive_copy_data(struct archive *in, struct archive *out, struct archive **failed)
{
	const void *buf;
	size_t size;
	la_int64_t off;
	int r;

	while ((r = archive_read_data_block(in, &buf, &size, &off)) == ARCHIVE_OK)
		if (archive_write_data_block(out, buf, size, off) != ARCHIVE_OK) {
			*failed = out;
			return -1;
		}
	if (r != ARCHIVE_EOF) {
		*failed = in;
		return -1;
	}
	return 0;
}
