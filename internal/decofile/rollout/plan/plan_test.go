package plan

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func steps(v ...any) []intstr.IntOrString {
	var out []intstr.IntOrString
	for _, s := range v {
		switch s := s.(type) {
		case int:
			out = append(out, intstr.FromInt32(int32(s)))
		case string:
			out = append(out, intstr.FromString(s))
		}
	}
	return out
}

func TestSizes(t *testing.T) {
	cases := []struct {
		name  string
		steps []intstr.IntOrString
		pods  int
		want  []int
	}{
		{"count then percentages", steps(1, "50%", "100%"), 6, []int{1, 3, 6}},
		{"percent rounds up", steps("10%", "50%", "100%"), 6, []int{1, 3, 6}},
		{"tiny percent is at least one pod", steps("1%", "100%"), 3, []int{1, 3}},
		{"steps that add nothing are dropped", steps(1, "10%", "50%", "100%"), 6, []int{1, 3, 6}},
		{"count above the pods is all of them", steps(5, "100%"), 2, []int{2}},
		{"last step below 100% gets one for every pod", steps(1, "25%"), 8, []int{1, 2, 8}},
		{"one pod", steps(1, "10%", "50%", "100%"), 1, []int{1}},
		{"no pods", steps(1, "100%"), 0, nil},
		{"100% only", steps("100%"), 1000, []int{1000}},
		{"counts only", steps(1, 2, 10), 4, []int{1, 2, 4}},
	}
	for _, c := range cases {
		got, err := Sizes(c.steps, c.pods)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: Sizes(%v, %d) = %v, %v; want %v", c.name, c.steps, c.pods, got, err, c.want)
		}
	}
}

func TestValidateRefusesBadSteps(t *testing.T) {
	bad := map[string][]intstr.IntOrString{
		"empty":               nil,
		"zero count":          steps(0, "100%"),
		"negative count":      steps(-1),
		"above 100%":          steps("150%"),
		"zero percent":        steps("0%"),
		"no percent sign":     steps("50"),
		"signed percent":      steps("+5%"),
		"not a number":        steps("half"),
		"decreasing percents": steps("50%", "10%"),
		"repeated percent":    steps("50%", "50%"),
		"decreasing counts":   steps(3, 2),
		"count after percent": steps("10%", 5),
	}
	for name, s := range bad {
		if err := Validate(s); err == nil {
			t.Errorf("%s: %v accepted", name, s)
		}
		if _, err := Sizes(s, 10); err == nil {
			t.Errorf("%s: Sizes accepted %v", name, s)
		}
	}
	if err := Validate(steps(1, 5, "10%", "50%", "100%")); err != nil {
		t.Errorf("valid steps refused: %v", err)
	}
}
