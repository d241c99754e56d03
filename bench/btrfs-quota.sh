#!/bin/bash
# The cost of btrfs quotas on snapshots (docs/controller.md, "Disk"): a
# fresh 2 GiB loop btrfs with quotas off, simple (Linux 6.7+) or full;
# a 500-file subvolume; 60 read-only snapshots in a row, one file changed
# before each (as every_step checkpoints do). Needs root.
#   bench/btrfs-quota.sh off|simple|full
set -e
mode=${1:?off|simple|full}
M=$(mktemp -d /tmp/btrfs-quota.XXXXXX); I=$M.img
truncate -s 2G "$I"; mkfs.btrfs -q "$I" >/dev/null 2>&1
L=$(losetup --find --show "$I"); mount "$L" "$M"
trap 'umount "$M"; losetup -d "$L"; rm -f "$I"; rmdir "$M"' EXIT
# BTRFS_IOC_QUOTA_CTL with cmd 1 (full) or 4 (simple): btrfs-progs 6.2 has no --simple
quota() {
    python3 -c 'import fcntl, os, struct, sys
fcntl.ioctl(os.open(sys.argv[1], os.O_RDONLY), (3 << 30) | (16 << 16) | (0x94 << 8) | 40,
            bytearray(struct.pack("QQ", int(sys.argv[2]), 0)))' "$M" "$1"
}
case $mode in
    full) quota 1; btrfs quota rescan -w "$M" >/dev/null ;;
    simple) quota 4 ;;
    off) ;;
    *) echo "off|simple|full" >&2; exit 2 ;;
esac
btrfs subvolume create "$M/sb" >/dev/null
for i in $(seq 1 500); do head -c 8192 /dev/urandom > "$M/sb/f$i"; done
sync
t0=$(date +%s%N)
for i in $(seq 1 60); do
    echo x >> "$M/sb/f$i"
    btrfs subvolume snapshot -r "$M/sb" "$M/ck$i" >/dev/null
done
t1=$(date +%s%N)
echo "$mode: $(( (t1 - t0) / 60000 )) us per snapshot (60, incl. the btrfs CLI)"
