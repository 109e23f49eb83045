package cluster

// Headers of a request one replica forwards to another (a client's turn to
// the replica that holds its conversation, an admin action to the holder of
// the instance's lease). A forwarded request names the replica that sent it
// and carries the cluster token; it is never forwarded again: one hop at
// most.
const (
	HopHeader   = "X-Poolgate-Forwarded-By"
	TokenHeader = "X-Poolgate-Cluster-Token"
)
