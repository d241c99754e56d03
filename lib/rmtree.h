#ifndef ORC_RMTREE_H
#define ORC_RMTREE_H
/*
 * Removing a directory tree whose contents are not trusted (written by a
 * sandbox, or imported from outside): every step is relative to an open
 * directory fd, symlinks are unlinked and never followed, the depth is
 * bounded, a directory on another filesystem (a mount point) is refused,
 * and directories without owner permissions are made removable (we own the
 * tree by then). The caller makes sure nothing else writes to it meanwhile.
 */

/* Remove parent_fd/name and everything below it. ENOENT counts as success;
 * ORC_ERROR (the first failing entry logged) otherwise. */
int orc_tree_remove_at(int parent_fd, const char *name);
#endif
