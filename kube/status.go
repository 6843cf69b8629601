package kube

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/controller"
)

// Pending reasons the backend gives up on after a while (Deadlines), and
// the failure class of the attempt that ends so.
const (
	ReasonUnschedulable     = "Unschedulable"
	ReasonImagePullBackOff  = "ImagePullBackOff"
	ReasonErrImagePull      = "ErrImagePull"
	ReasonCreateConfigError = "CreateContainerConfigError"
)

// Deadlines is how long a pod may stay pending for each reason before its
// attempt fails with that reason's class.
type Deadlines struct {
	Unschedulable time.Duration // no node fits, or its node refuses it
	ImagePull     time.Duration // ImagePullBackOff, ErrImagePull
	Config        time.Duration // CreateContainerConfigError
}

// DefaultDeadlines are the deadlines of a backend that sets none.
var DefaultDeadlines = Deadlines{Unschedulable: 5 * time.Minute, ImagePull: 3 * time.Minute, Config: time.Minute}

// podState is what a pod says of its attempt.
type podState struct {
	started bool
	ended   *controller.AttemptEnd
	// pending is why the pod has not started ("" when it has no known
	// reason), and message the cluster's words for it.
	pending, message string
}

// readPod reads a pod's phase and container statuses.
func readPod(p *corev1.Pod) podState {
	switch p.Status.Phase {
	case corev1.PodSucceeded:
		code := 0
		if t := terminated(p); t != nil {
			code = int(t.ExitCode)
		}
		return podState{started: true, ended: &controller.AttemptEnd{State: berth.AttemptSucceeded, ExitCode: &code}}
	case corev1.PodFailed:
		end := &controller.AttemptEnd{State: berth.AttemptFailed, Reason: p.Status.Reason}
		if t := terminated(p); t != nil {
			code := int(t.ExitCode)
			end.ExitCode = &code
			end.Reason = fmt.Sprintf("exit code %d", code)
			if t.Reason != "" && t.Reason != "Error" && t.Reason != "Completed" {
				end.Reason = t.Reason + ", " + end.Reason
			}
			if t.Reason == "OOMKilled" {
				end.Class = berth.FailureOOM
			}
		} else if end.Reason == "" {
			end.Reason = "pod failed: " + p.Status.Message
		}
		return podState{started: true, ended: end}
	case corev1.PodRunning:
		return podState{started: true}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
			return podState{pending: w.Reason, message: w.Message}
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason != "" {
			return podState{pending: c.Reason, message: c.Message}
		}
	}
	return podState{}
}

// terminated returns the job container's terminated state, or nil.
func terminated(p *corev1.Pod) *corev1.ContainerStateTerminated {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == container && cs.State.Terminated != nil {
			return cs.State.Terminated
		}
	}
	return nil
}

// giveUp returns the deadline of a pending reason and the failure class
// of an attempt that stays pending past it; zero for a reason the
// backend waits out.
func (d Deadlines) giveUp(reason string) (time.Duration, string) {
	switch reason {
	case ReasonUnschedulable:
		return d.Unschedulable, berth.FailureUnschedulable
	case ReasonImagePullBackOff, ReasonErrImagePull:
		return d.ImagePull, berth.FailureImagePull
	case ReasonCreateConfigError:
		return d.Config, berth.FailureCannotStart
	}
	return 0, ""
}
