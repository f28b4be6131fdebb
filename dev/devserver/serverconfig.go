package devserver

import (
	"net"
	"strconv"
	"time"

	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/primitives"
)

func serverConfig(host string, port int, ports []int, st stores) *config.Config {
	svc := func(grpc, membership int) config.Service {
		return config.Service{RPC: config.RPC{GRPCPort: grpc, MembershipPort: membership, BindOnIP: host}}
	}
	frontendHostPort := net.JoinHostPort(host, strconv.Itoa(port))
	return &config.Config{
		Global: config.Global{
			Membership: config.Membership{MaxJoinDuration: 30 * time.Second, BroadcastAddress: host},
		},
		Persistence: st.persistence(),
		ClusterMetadata: &cluster.Config{
			EnableGlobalNamespace:    false,
			FailoverVersionIncrement: 10,
			MasterClusterName:        clusterName,
			CurrentClusterName:       clusterName,
			ClusterInformation: map[string]cluster.ClusterInformation{
				clusterName: {Enabled: true, InitialFailoverVersion: 1, RPCAddress: frontendHostPort},
			},
		},
		DCRedirectionPolicy: config.DCRedirectionPolicy{Policy: "noop"},
		Services: map[string]config.Service{
			string(primitives.FrontendService): svc(port, ports[0]),
			string(primitives.HistoryService):  svc(ports[1], ports[2]),
			string(primitives.MatchingService): svc(ports[3], ports[4]),
			string(primitives.WorkerService):   svc(ports[5], ports[6]),
		},
		Archival: config.Archival{
			History:    config.HistoryArchival{State: "disabled"},
			Visibility: config.VisibilityArchival{State: "disabled"},
		},
		NamespaceDefaults: config.NamespaceDefaults{
			Archival: config.ArchivalNamespaceDefaults{
				History:    config.HistoryArchivalNamespaceDefaults{State: "disabled"},
				Visibility: config.VisibilityArchivalNamespaceDefaults{State: "disabled"},
			},
		},
		PublicClient: config.PublicClient{HostPort: frontendHostPort},
	}
}
