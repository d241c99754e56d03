#ifndef AGENT_VERSION_H
#define AGENT_VERSION_H
#define AGENT_VERSION "0.1.0"
#endif
