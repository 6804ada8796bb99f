// Package failover follows Sentinel announcements on every configured Sentinel: a +switch-master
// resyncs every tenant on the new master and its replicas, and a node that restarted or came back
// (+reboot, -sdown, +slave) is resynced alone, because a node without persistence lost its ACLs.
package failover

import (
	"fmt"
	"net"
	"strings"
)

// Sentinel channels the watcher subscribes to.
const (
	ChannelSwitchMaster = "+switch-master"
	ChannelReboot       = "+reboot"
	ChannelSdownCleared = "-sdown"
	ChannelReplica      = "+slave"
)

// Channels lists every channel the watcher subscribes to.
var Channels = []string{ChannelSwitchMaster, ChannelReboot, ChannelSdownCleared, ChannelReplica}

// Switch is a parsed +switch-master message.
type Switch struct {
	// Master is the monitored master's name.
	Master string
	// Old and New are the previous and the promoted master's host:port.
	Old, New string
}

// ParseSwitch parses "<master name> <old ip> <old port> <new ip> <new port>".
func ParseSwitch(payload string) (Switch, error) {
	f := strings.Fields(payload)
	if len(f) != 5 {
		return Switch{}, fmt.Errorf("malformed +switch-master message %q", payload)
	}
	return Switch{Master: f[0], Old: net.JoinHostPort(f[1], f[2]), New: net.JoinHostPort(f[3], f[4])}, nil
}

// NodeEvent is a parsed instance message (+reboot, -sdown, +slave) about a data node.
type NodeEvent struct {
	// Channel is the Sentinel channel the message came on.
	Channel string
	// Type is "master" or "slave".
	Type string
	// Master is the name of the master the node belongs to.
	Master string
	// Addr is the node's host:port.
	Addr string
}

// ParseNodeEvent parses Sentinel's instance details: "<type> <name> <ip> <port> @ <master name>
// <master ip> <master port>" for replicas and "master <name> <ip> <port>" for a master. ok is
// false for messages about Sentinels or anything else that is not a data node.
func ParseNodeEvent(channel, payload string) (NodeEvent, bool) {
	f := strings.Fields(payload)
	if len(f) < 4 {
		return NodeEvent{}, false
	}
	ev := NodeEvent{Channel: channel, Type: f[0], Addr: net.JoinHostPort(f[2], f[3])}
	switch f[0] {
	case "master":
		ev.Master = f[1]
	case "slave", "replica":
		if len(f) < 6 || f[4] != "@" {
			return NodeEvent{}, false
		}
		ev.Master = f[5]
	default:
		return NodeEvent{}, false
	}
	return ev, true
}
