/*
 * The sandbox's seccomp filter (libseccomp), compiled once at start-up to
 * classic BPF in a memfd; bubblewrap loads it (`--seccomp FD`) right
 * before it execs the agent, after it has set up every mount, so the
 * sandbox itself never needs what the filter denies.
 *
 * Default: allow. Denied with EPERM (so programs see an ordinary
 * permission error and carry on): kernel modules, kexec, bpf,
 * perf_event_open, userfaultfd, the keyring, every mount API, namespaces
 * (unshare, setns), reboot, swap, accounting, the clock, raw I/O ports,
 * lookup_dcookie, open_by_handle_at, personality() other than the
 * default and the query, and the btrfs ioctls that make a subvolume or a
 * snapshot (a new subvolume has a qgroup of its own, outside the
 * sandbox's disk limit: local_disk.c). Any syscall of another ABI (32-bit x86 via
 * int 0x80, x32) kills the process. See docs/controller.md.
 *
 * The filter is the linear list libseccomp emits, and that costs nothing
 * per syscall: since Linux 5.11 the kernel works out at load time which
 * syscall numbers the filter allows whatever their arguments, and lets
 * those through on a bitmap test without running the BPF (every syscall
 * here but personality() and ioctl(), whose rules look at an argument).
 * Measured on this 6.x kernel: getppid() costs
 * the same with and without the filter; only an argument-dependent rule
 * on it made it walk the list (+0.1 us). A reordered or binary-tree
 * layout would buy nothing (bench/results/agentexec-2026-12-03c.md).
 */
#include "local.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "err.h"
#include "log.h"

static const char *const denied[] = {
	/* kernel code and kernel-side programs */
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
	"bpf", "perf_event_open", "userfaultfd", "lookup_dcookie",
	/* the kernel keyring is not namespaced */
	"keyctl", "add_key", "request_key",
	/* mounts and namespaces: bwrap set everything up already */
	"mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsmount",
	"fspick", "mount_setattr", "unshare", "setns",
	/* the machine, not the sandbox */
	"reboot", "swapon", "swapoff", "acct", "settimeofday", "clock_settime",
	"clock_adjtime", "iopl", "ioperm", "open_by_handle_at", "quotactl", "syslog",
	"vhangup", "uselib",
};

/*
 * personality(): allow 0 (PER_LINUX, the default) and 0xffffffff (the
 * query); deny everything else, e.g. ADDR_NO_RANDOMIZE (no ASLR) or
 * READ_IMPLIES_EXEC. libseccomp takes one comparison per argument per
 * rule, and rules of one action are OR'ed, so the denied set is written
 * as a union: any 64-bit value above 32 bits, plus every 32-bit value
 * with a set bit k followed (cyclically) by a clear bit k+1 -- which is
 * every 32-bit value but all-zeros and all-ones.
 */
static int deny_personality(scmp_filter_ctx ctx)
{
	int k, err;

	err = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
			       SCMP_A0(SCMP_CMP_GT, 0xffffffffULL));
	for (k = 0; k < 32 && err == 0; k++) {
		uint64_t set = 1ULL << k, clear = 1ULL << ((k + 1) % 32);
		err = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
				       SCMP_A0(SCMP_CMP_MASKED_EQ, set | clear, set));
	}
	return err;
}

/* The kernel reads an ioctl's request as 32 bits: compare only those, so
 * high bits set by the caller do not slip past. */
static int deny_subvolume_ioctls(scmp_filter_ctx ctx)
{
	static const unsigned long reqs[] = {
		BTRFS_IOC_SUBVOL_CREATE, BTRFS_IOC_SUBVOL_CREATE_V2,
		BTRFS_IOC_SNAP_CREATE, BTRFS_IOC_SNAP_CREATE_V2,
	};
	size_t i;
	int err = 0;

	for (i = 0; i < sizeof(reqs) / sizeof(*reqs) && err == 0; i++)
		err = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
				       SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffULL, reqs[i]));
	return err;
}

int ctl_seccomp_build(int *out)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	size_t i;
	int fd = -1, nr, e, err = 0;

	if (!ctx) {
		orc_log(ORC_LOG_ERROR, "seccomp_init() failed", NULL);
		return ORC_ERROR;
	}
	/* Only the native ABI is in the filter: anything else is killed. */
	if ((e = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)) < 0)
		goto fail;
	for (i = 0; i < sizeof(denied) / sizeof(*denied); i++) {
		nr = seccomp_syscall_resolve_name(denied[i]);
		if (nr == __NR_SCMP_ERROR)
			continue;   /* not a syscall on this architecture */
		if ((e = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0)) < 0) {
			orc_log(ORC_LOG_ERROR, "seccomp rule failed", "syscall", denied[i],
				"error", strerror(-e), NULL);
			goto fail;
		}
	}
	if ((e = deny_personality(ctx)) < 0 || (e = deny_subvolume_ioctls(ctx)) < 0)
		goto fail;
	if ((fd = memfd_create("orchard-seccomp", MFD_CLOEXEC)) < 0) {
		e = -errno;
		goto fail;
	}
	if ((e = seccomp_export_bpf(ctx, fd)) < 0)
		goto fail;
	*out = fd;
	fd = -1;
	goto done;
fail:
	orc_log(ORC_LOG_ERROR, "building the seccomp filter failed", "error", strerror(-e), NULL);
	err = ORC_ERROR;
done:
	if (fd >= 0)
		close(fd);
	seccomp_release(ctx);
	return err;
}

int ctl_seccomp_open(int filter_fd)
{
	char path[64];

	/* A fresh open file description: its own offset at 0, so concurrent
	 * launches never share one. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", filter_fd);
	return open(path, O_RDONLY | O_CLOEXEC);
}
