package inspect

import "time"

// KindStats are the counts of one kind.
type KindStats struct {
	// Kind is one of the Kind constants.
	Kind string `json:"kind"`
	// Total objects of the kind.
	Total int `json:"total"`
	// States counts the objects by state.
	States map[State]int `json:"states"`
	// Bytes stored, summed (Decofiles).
	Bytes int64 `json:"bytes,omitempty"`
	// Pods confirmed of total, summed (Decofiles).
	Pods *Pods `json:"pods,omitempty"`
	// Pending changes not yet pushed, summed (GitTargets).
	Pending int32 `json:"pending,omitempty"`
	// OldestPushSeconds is the longest time since the last push of a target with pending
	// changes (GitTargets): how far behind the mirror may be.
	OldestPushSeconds int64 `json:"oldestPushSeconds,omitempty"`
	// Provisioned tenants have a cache user on the nodes (Tenants).
	Provisioned int `json:"provisioned,omitempty"`
}

// Stats counts summaries per kind, in the order kinds first appear. now is the time lag is
// measured against.
func Stats(ss []Summary, now time.Time) []KindStats {
	var out []KindStats
	index := map[string]int{}
	for _, s := range ss {
		i, ok := index[s.Kind]
		if !ok {
			i = len(out)
			index[s.Kind] = i
			out = append(out, KindStats{Kind: s.Kind, States: map[State]int{}})
		}
		k := &out[i]
		k.Total++
		k.States[s.State]++
		k.Bytes += s.Bytes
		if s.Pods != nil {
			if k.Pods == nil {
				k.Pods = &Pods{}
			}
			k.Pods.Confirmed += s.Pods.Confirmed
			k.Pods.Total += s.Pods.Total
		}
		k.Pending += s.Pending
		if s.Kind == KindTenant && s.Revision != "" {
			k.Provisioned++
		}
		if s.Kind == KindGitTarget && s.Pending > 0 && s.LastChange != nil {
			k.OldestPushSeconds = max(k.OldestPushSeconds, int64(now.Sub(*s.LastChange)/time.Second))
		}
	}
	return out
}
