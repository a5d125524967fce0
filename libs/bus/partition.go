package bus

import "hash/fnv"

// DefaultPartitions is the partition count when none is configured. Every
// stage of one node must use the same count.
const DefaultPartitions = 16

// MaxPartitions bounds the configured partition count.
const MaxPartitions = 1024

// Partition returns the partition of a pod: FNV-1a 32-bit of its UID modulo
// the partition count. It is the function of nats-server's partition()
// subject mapping, so a server-side mapping on the UID token lands each pod
// on the same partition as this does.
func Partition(uid string, partitions int) int {
	if partitions <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(uid))
	return int(h.Sum32() % uint32(partitions))
}
