#ifndef CLI_TERM_H
#define CLI_TERM_H
/*
 * The local terminal during an interactive session (shell, exec -t): raw
 * mode, restored on every way out (normal return, error, exit(), a fatal
 * signal such as SIGTERM or SIGHUP), and window size changes delivered as
 * a readable descriptor (a self-pipe written by the SIGWINCH handler), so
 * one poll() loop sees keys, the network and resizes.
 */
/* Put stdin's terminal in raw mode (no echo, no line editing, no signals
 * from keys: ^C goes to the sandbox). 0, or -1 when stdin is not a terminal. */
int cli_term_raw(void);
/* Back to how it was; harmless when not raw (async-signal-safe inside). */
void cli_term_restore(void);
/* Start watching SIGWINCH: the returned fd becomes readable on a resize; -1 on failure. */
int cli_term_winch_fd(void);
/* Empty the resize pipe after poll() said so. */
void cli_term_winch_drain(void);
/* stdin's window size; 0, or -1 (then rows/cols are 24x80). */
int cli_term_size(int *rows, int *cols);
#endif
