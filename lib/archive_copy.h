#ifndef ORC_ARCHIVE_COPY_H
#define ORC_ARCHIVE_COPY_H
/*
 * The data of one tar entry from a libarchive reader to a writer (a disk
 * writer, for `orchardctl cp ID:DIR PATH` and `orchard-admin image import
 * --tar`). Each caller words its own errors, so this says only which side
 * failed.
 */
#include <archive.h>

/*
 * Copy the current entry's data blocks (sparse offsets kept). 0 when the
 * entry ended; -1 with *failed = out (a write failed) or in (the stream
 * broke): archive_error_string(*failed) says why.
 */
int orc_archive_copy_data(struct archive *in, struct archive *out, struct archive **failed);

#endif
