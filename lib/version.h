#ifndef ORC_VERSION_H
#define ORC_VERSION_H
/* Orchard's release, shared by every program (orchard_build_info, --version). */
#define ORC_VERSION "0.1.0"
#endif
