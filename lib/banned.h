#ifndef ORC_BANNED_H
#define ORC_BANNED_H
/*
 * Functions that make overflows and silent parse failures easy. Included into
 * every translation unit by the Makefile (git's banned.h): use orc_buf,
 * snprintf, orc_parse_i64 and friends instead.
 */
/* System headers first, so their own declarations are not rewritten. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BANNED(f) sorry_##f##_is_banned_in_orchard

#undef strcpy
#define strcpy(x, y) BANNED(strcpy)
#undef strcat
#define strcat(x, y) BANNED(strcat)
#undef strncpy
#define strncpy(x, y, n) BANNED(strncpy)
#undef sprintf
#define sprintf(...) BANNED(sprintf)
#undef vsprintf
#define vsprintf(...) BANNED(vsprintf)
#undef strtok
#define strtok(x, y) BANNED(strtok)
#undef atoi
#define atoi(x) BANNED(atoi)
#undef atol
#define atol(x) BANNED(atol)
#undef gets
#define gets(x) BANNED(gets)

#endif
