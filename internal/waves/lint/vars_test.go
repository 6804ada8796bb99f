package lint

import (
	"reflect"
	"testing"
)

func TestVarRef(t *testing.T) {
	in := "a: ${ONE}\nb: ${TWO:=x}\nc: ${THREE:-y}\nd: $${FOUR}\ne: $FIVE\nf: ${_SIX_6}\ng: ${7BAD}\nh: ${EIGHT=z}\n"
	var plain, defaulted, escaped []string
	for _, m := range varRef.FindAllStringSubmatch(in, -1) {
		switch {
		case m[1] != "":
			escaped = append(escaped, m[2])
		case m[3] != "":
			defaulted = append(defaulted, m[2])
		default:
			plain = append(plain, m[2])
		}
	}
	if !reflect.DeepEqual(plain, []string{"ONE", "_SIX_6"}) || !reflect.DeepEqual(defaulted, []string{"TWO", "THREE", "EIGHT"}) || !reflect.DeepEqual(escaped, []string{"FOUR"}) {
		t.Fatalf("plain %v defaulted %v escaped %v", plain, defaulted, escaped)
	}
}
