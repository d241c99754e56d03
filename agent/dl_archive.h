#ifndef AGENT_DL_ARCHIVE_H
#define AGENT_DL_ARCHIVE_H
#include <archive.h>
#include <archive_entry.h>
/*
 * libarchive, loaded on first use (dl.h), the same way as libgit2
 * (dl_git.h): each function the agent calls is listed once in
 * AGENT_ARCHIVE_SYMS and #defined to its function pointer. Call
 * agent_archive_load (files.h) before the first one.
 */

/* libarchive 3's soname has been libarchive.so.13 since 3.0. */
#if ARCHIVE_VERSION_NUMBER < 3000000 || ARCHIVE_VERSION_NUMBER >= 4000000
#error "libarchive 3 expected: check AGENT_LIBARCHIVE_SONAME"
#endif
#define AGENT_LIBARCHIVE_SONAME "libarchive.so.13"

#define AGENT_ARCHIVE_SYMS(X) \
	X(archive_entry_clear) \
	X(archive_entry_copy_hardlink) \
	X(archive_entry_copy_pathname) \
	X(archive_entry_copy_stat) \
	X(archive_entry_copy_symlink) \
	X(archive_entry_free) \
	X(archive_entry_hardlink) \
	X(archive_entry_new) \
	X(archive_entry_pathname) \
	X(archive_entry_set_size) \
	X(archive_entry_size) \
	X(archive_error_string) \
	X(archive_filter_bytes) \
	X(archive_read_data_block) \
	X(archive_read_free) \
	X(archive_read_new) \
	X(archive_read_next_header) \
	X(archive_read_open_fd) \
	X(archive_read_support_filter_gzip) \
	X(archive_read_support_format_tar) \
	X(archive_set_error) \
	X(archive_write_close) \
	X(archive_write_data) \
	X(archive_write_data_block) \
	X(archive_write_disk_new) \
	X(archive_write_disk_set_options) \
	X(archive_write_fail) \
	X(archive_write_finish_entry) \
	X(archive_write_free) \
	X(archive_write_header) \
	X(archive_write_new) \
	X(archive_write_open) \
	X(archive_write_set_bytes_in_last_block) \
	X(archive_write_set_format_pax_restricted)

#define AGENT_DL_DECLARE(f) extern __typeof__(f) *agent_dl_##f;
AGENT_ARCHIVE_SYMS(AGENT_DL_DECLARE)
#undef AGENT_DL_DECLARE

#ifndef AGENT_DL_ARCHIVE_TABLE
#define archive_entry_clear agent_dl_archive_entry_clear
#define archive_entry_copy_hardlink agent_dl_archive_entry_copy_hardlink
#define archive_entry_copy_pathname agent_dl_archive_entry_copy_pathname
#define archive_entry_copy_stat agent_dl_archive_entry_copy_stat
#define archive_entry_copy_symlink agent_dl_archive_entry_copy_symlink
#define archive_entry_free agent_dl_archive_entry_free
#define archive_entry_hardlink agent_dl_archive_entry_hardlink
#define archive_entry_new agent_dl_archive_entry_new
#define archive_entry_pathname agent_dl_archive_entry_pathname
#define archive_entry_set_size agent_dl_archive_entry_set_size
#define archive_entry_size agent_dl_archive_entry_size
#define archive_error_string agent_dl_archive_error_string
#define archive_filter_bytes agent_dl_archive_filter_bytes
#define archive_read_data_block agent_dl_archive_read_data_block
#define archive_read_free agent_dl_archive_read_free
#define archive_read_new agent_dl_archive_read_new
#define archive_read_next_header agent_dl_archive_read_next_header
#define archive_read_open_fd agent_dl_archive_read_open_fd
#define archive_read_support_filter_gzip agent_dl_archive_read_support_filter_gzip
#define archive_read_support_format_tar agent_dl_archive_read_support_format_tar
#define archive_set_error agent_dl_archive_set_error
#define archive_write_close agent_dl_archive_write_close
#define archive_write_data agent_dl_archive_write_data
#define archive_write_data_block agent_dl_archive_write_data_block
#define archive_write_disk_new agent_dl_archive_write_disk_new
#define archive_write_disk_set_options agent_dl_archive_write_disk_set_options
#define archive_write_fail agent_dl_archive_write_fail
#define archive_write_finish_entry agent_dl_archive_write_finish_entry
#define archive_write_free agent_dl_archive_write_free
#define archive_write_header agent_dl_archive_write_header
#define archive_write_new agent_dl_archive_write_new
#define archive_write_open agent_dl_archive_write_open
#define archive_write_set_bytes_in_last_block agent_dl_archive_write_set_bytes_in_last_block
#define archive_write_set_format_pax_restricted agent_dl_archive_write_set_format_pax_restricted
#endif
#endif
