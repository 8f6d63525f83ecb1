package main

// The privileges of a process runtime container, computed from the CRI security context as
// containerd computes them, and applied by util-linux setpriv as runc applies them: the
// process's user, groups and capability sets are set just before its command runs, and the
// kernel enforces them from there on. A root process keeps only the capabilities left in its
// bounding set (with empty inheritable and ambient sets, that is all an exec can give it); a
// non-root one keeps none.

import (
	"fmt"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// containerd's default capabilities for a container that is not privileged (oci.defaultUnixCaps).
var defaultCapabilities = []string{
	"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
	"SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE",
}

type privileges struct {
	// Privileged: every capability (setpriv leaves the sets alone).
	Privileged bool    `json:"privileged"`
	UID        int64   `json:"uid"`
	GID        int64   `json:"gid"`
	Groups     []int64 `json:"groups"`
	// The bounding set in setpriv's syntax, e.g. "-all,+chown".
	Bounding   string `json:"bounding"`
	NoNewPrivs bool   `json:"noNewPrivs"`
}

func containerPrivileges(sc *runtimeapi.LinuxContainerSecurityContext) privileges {
	p := privileges{
		Privileged: sc.GetPrivileged(),
		UID:        sc.GetRunAsUser().GetValue(),
		GID:        sc.GetRunAsGroup().GetValue(),
		Groups:     sc.GetSupplementalGroups(),
		NoNewPrivs: sc.GetNoNewPrivs(),
	}
	if !p.Privileged {
		p.Bounding = boundingSet(sc.GetCapabilities())
	}
	return p
}

// boundingSet applies the pod's add and drop to containerd's defaults in containerd's order
// (WithCapabilities in its CRI plugin): "ALL" added, then "ALL" dropped, then single adds, then
// single drops. setpriv reads the list left to right.
func boundingSet(c *runtimeapi.Capability) string {
	add := upper(c.GetAddCapabilities())
	drop := upper(c.GetDropCapabilities())
	tokens := []string{"-all"}
	switch {
	case contains(drop, "ALL"):
	case contains(add, "ALL"):
		tokens = []string{"+all"}
	default:
		for _, name := range defaultCapabilities {
			tokens = append(tokens, "+"+name)
		}
	}
	for _, name := range add {
		if name != "ALL" {
			tokens = append(tokens, "+"+name)
		}
	}
	for _, name := range drop {
		if name != "ALL" {
			tokens = append(tokens, "-"+name)
		}
	}
	return strings.ToLower(strings.Join(tokens, ","))
}

func upper(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, strings.TrimPrefix(strings.ToUpper(n), "CAP_"))
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// command is argv run under these privileges: setpriv, then the command.
func (p privileges) command(argv []string) []string {
	args := []string{"/usr/bin/setpriv", "--reuid", fmt.Sprint(p.UID), "--regid", fmt.Sprint(p.GID)}
	if len(p.Groups) == 0 {
		args = append(args, "--clear-groups")
	} else {
		groups := make([]string, len(p.Groups))
		for i, g := range p.Groups {
			groups[i] = fmt.Sprint(g)
		}
		args = append(args, "--groups", strings.Join(groups, ","))
	}
	if !p.Privileged {
		args = append(args, "--bounding-set", p.Bounding, "--inh-caps", "-all", "--ambient-caps", "-all")
	}
	if p.NoNewPrivs {
		args = append(args, "--no-new-privs")
	}
	return append(append(args, "--"), argv...)
}
