// The greeter as a controller-runtime controller: the benchmark peer of
// `tests/src/bin/bench-greetings.rs` (which builds and runs it; see there).
//
// It makes the same writes as the greeter component under Capstan
// (examples/greeter/src/lib.rs): the finalizer, a server-side applied
// ConfigMap and Deployment owned by the Greeting, the status (a Ready
// condition and observedGeneration) through the status subresource when it
// changes, and an Event (`Created` on first sight, `Updated` for a new
// generation). Reads come from the manager's cache. Four workers, no
// client-side rate limit, no metrics or health listeners, no logs.
//
//	KUBECONFIG=... controller-runtime-greeter --namespace NS
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"reflect"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

const (
	finalizer = "examples.capstan.dev/greeter-cleanup"
	manager   = "controller-runtime-greeter"
)

var greetingGVK = schema.GroupVersionKind{Group: "examples.capstan.dev", Version: "v1alpha1", Kind: "Greeting"}

func newGreeting() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(greetingGVK)
	return u
}

type greeter struct {
	client   client.Client
	recorder recorder.EventRecorder
}

func (r *greeter) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	g := newGreeting()
	if err := r.client.Get(ctx, req.NamespacedName, g); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !g.GetDeletionTimestamp().IsZero() {
		if controllerutil.RemoveFinalizer(g, finalizer) {
			return ctrl.Result{}, client.IgnoreNotFound(r.client.Update(ctx, g))
		}
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(g, finalizer) {
		if err := r.client.Update(ctx, g); err != nil {
			return ctrl.Result{}, err
		}
	}

	name := g.GetName()
	message, _, _ := unstructured.NestedString(g.Object, "spec", "message")
	replicas, found, _ := unstructured.NestedInt64(g.Object, "spec", "replicas")
	if !found {
		replicas = 1
	}

	var deployed int64
	existing := &appsv1.Deployment{}
	switch err := r.client.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: name + "-greeter"}, existing); {
	case err == nil:
		deployed = int64(existing.Status.Replicas)
	case !apierrors.IsNotFound(err):
		return ctrl.Result{}, err
	}

	owner := metav1ac.OwnerReference().
		WithAPIVersion(greetingGVK.GroupVersion().String()).
		WithKind(greetingGVK.Kind).
		WithName(name).
		WithUID(g.GetUID()).
		WithController(true).
		WithBlockOwnerDeletion(true)
	labels := map[string]string{"app.kubernetes.io/name": "greeter", "examples.capstan.dev/greeting": name}

	cm := corev1ac.ConfigMap(name+"-greeting", req.Namespace).
		WithLabels(labels).
		WithOwnerReferences(owner).
		WithData(map[string]string{"message": message})
	if err := r.client.Apply(ctx, cm, client.FieldOwner(manager), client.ForceOwnership); err != nil {
		return ctrl.Result{}, err
	}

	deploy := appsv1ac.Deployment(name+"-greeter", req.Namespace).
		WithLabels(labels).
		WithOwnerReferences(owner).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(int32(replicas)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{"examples.capstan.dev/greeting": name})).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(labels).
				WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().
					WithName("greeter").
					WithImage("busybox:1.37").
					WithCommand("sh", "-c", "while true; do echo \"$MESSAGE\"; sleep 60; done").
					WithEnv(corev1ac.EnvVar().
						WithName("MESSAGE").
						WithValueFrom(corev1ac.EnvVarSource().
							WithConfigMapKeyRef(corev1ac.ConfigMapKeySelector().
								WithName(name + "-greeting").
								WithKey("message"))))))))
	if err := r.client.Apply(ctx, deploy, client.FieldOwner(manager), client.ForceOwnership); err != nil {
		return ctrl.Result{}, err
	}

	generation := g.GetGeneration()
	previous, hadStatus, _ := unstructured.NestedMap(g.Object, "status")
	status := desiredStatus(previous, generation, message, deployed)
	if !reflect.DeepEqual(previous, status) {
		body := newGreeting()
		body.SetName(name)
		body.SetNamespace(req.Namespace)
		body.Object["status"] = status
		if err := r.client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(body),
			client.FieldOwner(manager), client.ForceOwnership); err != nil {
			return ctrl.Result{}, err
		}
		observed, _, _ := unstructured.NestedInt64(previous, "observedGeneration")
		switch {
		case !hadStatus:
			r.recorder.Eventf(g, nil, corev1.EventTypeNormal, "Created", "Reconcile", "greeting %s set up", name)
		case observed != generation:
			r.recorder.Eventf(g, nil, corev1.EventTypeNormal, "Updated", "Reconcile", "greeting %s updated", name)
		}
	}
	return ctrl.Result{RequeueAfter: 300 * time.Second}, nil
}

// desiredStatus is the greeter's status: the Ready condition keeps its
// transition time while it stays true.
func desiredStatus(previous map[string]any, generation int64, message string, deployed int64) map[string]any {
	transition := metav1.Now().UTC().Format(time.RFC3339)
	conditions, _, _ := unstructured.NestedSlice(previous, "conditions")
	for _, c := range conditions {
		if c, ok := c.(map[string]any); ok && c["type"] == "Ready" && c["status"] == "True" {
			if t, ok := c["lastTransitionTime"].(string); ok {
				transition = t
			}
		}
	}
	return map[string]any{
		"observedGeneration": generation,
		"message":            message,
		"replicas":           deployed,
		"conditions": []any{map[string]any{
			"type":               "Ready",
			"status":             "True",
			"reason":             "Reconciled",
			"message":            "configmap and deployment are applied",
			"observedGeneration": generation,
			"lastTransitionTime": transition,
		}},
	}
}

func main() {
	namespace := flag.String("namespace", "", "the namespace to watch")
	flag.Parse()
	if *namespace == "" {
		fmt.Fprintln(os.Stderr, "--namespace is required")
		os.Exit(2)
	}
	log.SetLogger(logr.Discard())
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// No client-side rate limit: kube-rs and Capstan have none.
	cfg.QPS = -1
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{*namespace: {}}},
		// Greetings are read as unstructured objects: from the cache too,
		// not (the default) from the API server.
		Client:                 client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	r := &greeter{client: mgr.GetClient(), recorder: mgr.GetEventRecorder(manager)}
	err = ctrl.NewControllerManagedBy(mgr).
		For(newGreeting()).
		Owns(&corev1.ConfigMap{}).
		Owns(&appsv1.Deployment{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
