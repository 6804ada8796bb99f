package emit

import (
	"fmt"
	"os"
	"strings"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// doc is a YAML file edited in place: comments and the sequence indent style survive.
type doc struct {
	path    string
	orig    string
	style   kyaml.SequenceIndentStyle
	node    *kyaml.RNode
	changed bool
}

func readDoc(path string) (*doc, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	n, err := kyaml.Parse(string(data))
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return &doc{path: path, orig: string(data), style: kyaml.SequenceIndentStyle(kyaml.DeriveSeqIndentStyle(string(data))), node: n}, nil
}

func (d *doc) bytes() ([]byte, error) {
	out, err := kyaml.MarshalWithOptions(d.node.Document(), &kyaml.EncoderOptions{SeqIndent: d.style})
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", d.path, err)
	}
	return out, nil
}

// seq returns the sequence at field, creating it when create is set.
func (d *doc) seq(field string, create bool) (*kyaml.RNode, error) {
	f := d.node.Field(field)
	if f != nil && f.Value.YNode().Kind == kyaml.SequenceNode {
		return f.Value, nil
	}
	if f != nil && f.Value.YNode().Tag != kyaml.NodeTagNull {
		return nil, fmt.Errorf("%s: %s is not a list", d.path, field)
	}
	if !create {
		return nil, nil
	}
	s := kyaml.NewListRNode()
	if err := d.node.PipeE(kyaml.SetField(field, s)); err != nil {
		return nil, fmt.Errorf("%s: add %s: %w", d.path, field, err)
	}
	return s, nil
}

// scalarStrings returns the values of a sequence of scalars.
func scalarStrings(s *kyaml.RNode) []string {
	if s == nil {
		return nil
	}
	var out []string
	for _, n := range s.YNode().Content {
		out = append(out, strings.TrimSpace(n.Value))
	}
	return out
}

// headComment returns the comment above a sequence item (yaml.v3 keeps it on the item or, for a
// mapping, on its first key).
func headComment(n *kyaml.Node) string {
	if n.HeadComment != "" {
		return n.HeadComment
	}
	if n.Kind == kyaml.MappingNode && len(n.Content) > 0 {
		return n.Content[0].HeadComment
	}
	return ""
}

// setHeadComment puts a comment above a sequence item.
func setHeadComment(n *kyaml.Node, c string) {
	if c != "" {
		n.HeadComment = c
	}
}
