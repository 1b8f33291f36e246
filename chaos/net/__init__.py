"""Network plumbing of the ``netns`` backend and the network faults: namespaces, the run's
bridge and veth links (``chaos.net.fabric``), nftables rules (``chaos.net.nft``)."""
