#ifndef ORC_TAR_NAME_H
#define ORC_TAR_NAME_H
/*
 * A tar entry name (or hard/symbolic link target) that stays inside the
 * directory it is extracted to: not empty, not absolute, no ".."
 * component ("./x" is fine). The first line of defence wherever a tar
 * from outside is unpacked: the agent's PUT /archive (agent/tar_extract.c),
 * `orchardctl cp ID:DIR PATH` (cli/tar_extract.c) and `orchard-admin image
 * import --tar`; libarchive's SECURE_* flags (symlinks on the way, "..")
 * are the second. 0 or ORC_EINVALID.
 */
int orc_tar_name_check(const char *name);
#endif
