package follow

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

func decofile(commit string, status metav1.ConditionStatus, msg, rolloutID string) *decov1alpha1.Decofile {
	df := &decov1alpha1.Decofile{Status: decov1alpha1.DecofileStatus{SourceType: decov1alpha1.SourceGitHub, GitHubCommit: commit, ContentHash: "h"}}
	if status != "" {
		df.Status.Conditions = []metav1.Condition{{Type: decov1alpha1.ConditionPodsNotified, Status: status, Message: msg}}
	}
	if rolloutID != "" {
		df.Status.Rollout = &decov1alpha1.RolloutStatus{ID: rolloutID}
	}
	return df
}

const (
	full  = "0123abcd0123abcd0123abcd0123abcd0123abcd"
	other = "0123abcdffffffffffffffffffffffffffffffff"
)

func TestEvaluate(t *testing.T) {
	cases := []struct {
		name string
		df   *decov1alpha1.Decofile
		want string
		out  Outcome
	}{
		{"no condition", decofile("abc", "", "", ""), "commit:abc", Pending},
		{"in progress", decofile("abc", metav1.ConditionUnknown, "Notifying pods for commit:abc", "commit:abc"), "commit:abc", Pending},
		{"done", decofile("abc", metav1.ConditionTrue, "Successfully notified all pods for commit:abc", "commit:abc"), "commit:abc", Succeeded},
		{"failed", decofile("abc", metav1.ConditionFalse, "Failed to notify pods for commit:abc: 1 of 2 pods failed", "commit:abc"), "commit:abc", Failed},
		{"other version done", decofile("def", metav1.ConditionTrue, "Successfully notified all pods for commit:def", "commit:def"), "commit:abc", Pending},
		{"prefix is not a match", decofile("abcd", metav1.ConditionTrue, "Successfully notified all pods for commit:abcd", "commit:abcd"), "commit:abc", Pending},
		{"message only (no rollout summary)", decofile("abc", metav1.ConditionTrue, "Successfully notified all pods for commit:abc", ""), "commit:abc", Succeeded},
		{"current", decofile("abc", metav1.ConditionTrue, "Successfully notified all pods for commit:abc", "commit:abc"), Current, Succeeded},
		{"short sha", decofile(full, metav1.ConditionTrue, "Successfully notified all pods for commit:"+full, "commit:"+full), "commit:" + full[:7], Succeeded},
		{"short sha, upper case", decofile(full, metav1.ConditionTrue, "Successfully notified all pods for commit:"+full, "commit:"+full), "commit:0123ABCD", Succeeded},
		{"short sha failed", decofile(full, metav1.ConditionFalse, "Failed to notify pods for commit:"+full+": 1 of 2 pods failed", "commit:"+full), "commit:" + full[:9], Failed},
		{"short sha of another commit", decofile(full, metav1.ConditionTrue, "Successfully notified all pods for commit:"+full, "commit:"+full), "commit:0123abce", Pending},
		{"short sha ambiguous", decofile(full, metav1.ConditionUnknown, "Notifying pods for commit:"+full, "commit:"+other), "commit:" + full[:7], Failed},
	}
	for _, tc := range cases {
		if got := Evaluate(tc.df, tc.want); got.Outcome != tc.out {
			t.Errorf("%s: outcome %d (%s), want %d", tc.name, got.Outcome, got.Message, tc.out)
		}
	}
	silent := decofile("abc", "", "", "")
	silent.Spec.Silent = true
	if v := Evaluate(silent, "commit:abc"); v.Outcome != Failed {
		t.Errorf("silent: %+v", v)
	}
	empty := &decov1alpha1.Decofile{}
	if v := Evaluate(empty, Current); v.Outcome != Pending || v.ID != "" {
		t.Errorf("current without content: %+v", v)
	}
}

func TestValidTarget(t *testing.T) {
	for _, ok := range []string{"current", "commit:0123abc", "commit:" + full, "timestamp:1731598481"} {
		if err := ValidTarget(ok); err != nil {
			t.Error(err)
		}
	}
	for _, bad := range []string{"", "commit:", "commit:abc", "commit:0123ab", "abc", "branch:main"} {
		if ValidTarget(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
