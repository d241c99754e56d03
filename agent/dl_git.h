#ifndef AGENT_DL_GIT_H
#define AGENT_DL_GIT_H
#include <git2.h>
#include <git2/sys/mempack.h>
#include <git2/sys/odb_backend.h>
/*
 * libgit2, loaded on first use (dl.h). Every libgit2 function the agent
 * calls is listed once in AGENT_GIT_SYMS and #defined below to its
 * function pointer, so the git_*.c files read as plain libgit2 code. A
 * function used but not listed is a link error (libgit2 is not linked);
 * listed but not #defined, a compile error. Call agent_git_load (git_ops.h)
 * before the first one.
 */

#define AGENT_LIBGIT2_SONAME "libgit2.so." LIBGIT2_SOVERSION

#define AGENT_GIT_SYMS(X) \
	X(git_apply) \
	X(git_buf_dispose) \
	X(git_checkout_head) \
	X(git_diff_free) \
	X(git_diff_from_buffer) \
	X(git_diff_get_delta) \
	X(git_diff_num_deltas) \
	X(git_diff_to_buf) \
	X(git_diff_tree_to_workdir_with_index) \
	X(git_error_last) \
	X(git_libgit2_init) \
	X(git_libgit2_opts) \
	X(git_mempack_new) \
	X(git_object_free) \
	X(git_object_id) \
	X(git_odb_add_backend) \
	X(git_odb_free) \
	X(git_oid_tostr) \
	X(git_repository_free) \
	X(git_repository_init_ext) \
	X(git_repository_is_bare) \
	X(git_repository_odb) \
	X(git_repository_open_ext) \
	X(git_repository_set_workdir) \
	X(git_reset) \
	X(git_revparse_single) \
	X(git_tree_free)

#define AGENT_DL_DECLARE(f) extern __typeof__(f) *agent_dl_##f;
AGENT_GIT_SYMS(AGENT_DL_DECLARE)
#undef AGENT_DL_DECLARE

#ifndef AGENT_DL_GIT_TABLE
#define git_apply agent_dl_git_apply
#define git_buf_dispose agent_dl_git_buf_dispose
#define git_checkout_head agent_dl_git_checkout_head
#define git_diff_free agent_dl_git_diff_free
#define git_diff_from_buffer agent_dl_git_diff_from_buffer
#define git_diff_get_delta agent_dl_git_diff_get_delta
#define git_diff_num_deltas agent_dl_git_diff_num_deltas
#define git_diff_to_buf agent_dl_git_diff_to_buf
#define git_diff_tree_to_workdir_with_index agent_dl_git_diff_tree_to_workdir_with_index
#define git_error_last agent_dl_git_error_last
#define git_libgit2_init agent_dl_git_libgit2_init
#define git_libgit2_opts agent_dl_git_libgit2_opts
#define git_mempack_new agent_dl_git_mempack_new
#define git_object_free agent_dl_git_object_free
#define git_object_id agent_dl_git_object_id
#define git_odb_add_backend agent_dl_git_odb_add_backend
#define git_odb_free agent_dl_git_odb_free
#define git_oid_tostr agent_dl_git_oid_tostr
#define git_repository_free agent_dl_git_repository_free
#define git_repository_init_ext agent_dl_git_repository_init_ext
#define git_repository_is_bare agent_dl_git_repository_is_bare
#define git_repository_odb agent_dl_git_repository_odb
#define git_repository_open_ext agent_dl_git_repository_open_ext
#define git_repository_set_workdir agent_dl_git_repository_set_workdir
#define git_reset agent_dl_git_reset
#define git_revparse_single agent_dl_git_revparse_single
#define git_tree_free agent_dl_git_tree_free
#endif
#endif
