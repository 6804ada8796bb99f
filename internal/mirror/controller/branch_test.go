package controller

import "testing"

func TestBranchAllowed(t *testing.T) {
	for _, tc := range []struct {
		globs  []string
		branch string
		want   bool
	}{
		{nil, "anything", true},
		{[]string{"main"}, "main", true},
		{[]string{"main"}, "mainline", false},
		{[]string{"mirror/*"}, "mirror/prod", true},
		{[]string{"mirror/*"}, "mirror/prod/eu", false},
		{[]string{"release-[0-9]*"}, "release-2", true},
		{[]string{"[bad"}, "[bad", false},
	} {
		if got := BranchAllowed(tc.globs, tc.branch); got != tc.want {
			t.Errorf("BranchAllowed(%v, %q) = %v, want %v", tc.globs, tc.branch, got, tc.want)
		}
	}
	if _, err := matchGlob("[bad"); err == nil {
		t.Error("a malformed glob is accepted")
	}
}
