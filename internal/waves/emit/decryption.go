package emit

import (
	"fmt"
	"strings"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// DecryptionTarget returns the Kustomization name a patch entry of an environment kustomization
// adds SOPS decryption to, or "" when the entry is not a decryption patch.
func DecryptionTarget(entry *kyaml.RNode) string {
	patch, _ := entry.GetString("patch")
	if !strings.Contains(patch, "decryption") {
		return ""
	}
	kind, _ := entry.GetString("target.kind")
	name, _ := entry.GetString("target.name")
	if name != "" && (kind == "" || kind == "Kustomization") {
		return name
	}
	// A strategic-merge patch names its object itself.
	if p, err := kyaml.Parse(patch); err == nil && p.GetKind() == "Kustomization" {
		return p.GetName()
	}
	return ""
}

// decryptionPatches gives every wave of an environment a SOPS decryption patch (copied from the
// one the environment already has) and drops the patches of waves that no longer exist.
func (e *Emitter) decryptionPatches(env string, retire, inBase bool) error {
	rel := e.r.Layout.Clusters + "/" + env + "/kustomization.yaml"
	d, err := readDoc(e.abs(rel))
	if err != nil {
		return err
	}
	patches, err := d.seq("patches", false)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, g := range e.p.Groups {
		want[g.Name] = true
	}
	old := e.o.Plan.Prefix
	var template *kyaml.Node
	var templateName string
	var kept []*kyaml.Node
	have := map[string]bool{}
	last, dropped, carried := -1, -1, ""
	if patches != nil {
		for _, n := range patches.YNode().Content {
			name := DecryptionTarget(kyaml.NewRNode(n))
			if name == "" {
				kept = append(kept, n)
				continue
			}
			isWave := strings.HasPrefix(name, old+"-wave-") || e.generated[name] || want[name]
			if template == nil && (isWave || name == old) {
				template, templateName = n, name
			}
			if (isWave && !want[name]) || (retire && name == old) || have[name] {
				d.changed = true
				if dropped < 0 {
					dropped, carried = len(kept), headComment(n)
				}
				continue
			}
			have[name] = true
			kept = append(kept, n)
			if isWave || name == old {
				last = len(kept)
			}
		}
	}
	if template == nil && inBase {
		// Decryption is part of the base Kustomizations; nothing to patch per environment.
		return nil
	}
	var add []*kyaml.Node
	for _, g := range e.p.Groups {
		if have[g.Name] {
			continue
		}
		n, err := newPatch(template, templateName, g.Name, e.o.DecryptionSecret)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		add = append(add, n)
	}
	if len(add) == 0 && !d.changed {
		return nil
	}
	if last < 0 {
		last = len(kept)
		if dropped >= 0 {
			last = dropped
		}
	}
	if len(add) > 0 && last == dropped {
		// The patches replace the dropped one: they inherit its comment.
		setHeadComment(add[0], carried)
	}
	kept = append(kept[:last], append(add, kept[last:]...)...)
	if patches == nil {
		if patches, err = d.seq("patches", true); err != nil {
			return err
		}
	}
	patches.YNode().Content = kept
	data, err := d.bytes()
	if err != nil {
		return err
	}
	return e.write(rel, data)
}

// newPatch copies the template patch for another Kustomization, without the template's comments
// (they describe the patch set once), or writes the standard SOPS patch when there is none.
func newPatch(template *kyaml.Node, from, to, secret string) (*kyaml.Node, error) {
	if template == nil {
		text := fmt.Sprintf("target:\n  kind: Kustomization\n  name: %s\npatch: |\n  - op: add\n    path: /spec/decryption\n    value:\n      provider: sops\n      secretRef:\n        name: %s\n", to, secret)
		n, err := kyaml.Parse(text)
		if err != nil {
			return nil, err
		}
		return n.YNode(), nil
	}
	c := kyaml.CopyYNode(template)
	stripComments(c)
	rn := kyaml.NewRNode(c)
	if t := rn.Field("target"); t != nil && t.Value.Field("name") != nil {
		if err := t.Value.PipeE(kyaml.SetField("name", kyaml.NewStringRNode(to))); err != nil {
			return nil, err
		}
		return c, nil
	}
	// A strategic-merge patch: rename the object it patches.
	p := rn.Field("patch")
	if p == nil {
		return nil, fmt.Errorf("decryption patch for %s has neither a target nor a patch", from)
	}
	v := p.Value.YNode()
	v.Value = strings.Replace(v.Value, "name: "+from+"\n", "name: "+to+"\n", 1)
	return c, nil
}

func stripComments(n *kyaml.Node) {
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
	for _, c := range n.Content {
		stripComments(c)
	}
}
