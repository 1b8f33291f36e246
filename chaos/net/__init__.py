"""Network plumbing of the ``netns`` backend and the network faults: namespaces, the run's
bridge and veth links (``chaos.net.fabric``), nftables rules and tbf qdiscs
(``chaos.net.nft``), the userspace link emulator over TUN for latency
(``chaos.net.linkemu``), and Toxiproxy: the embedded server and the run's proxies
(``chaos.net.toxiproxy``)."""
