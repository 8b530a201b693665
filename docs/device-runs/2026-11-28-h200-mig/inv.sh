# Writes two one-node inventories for this host: $1/whole.toml (the H200 whole, MIG-capable)
# and $1/layout.toml (the same GPU with a MIG layout it does not have).
host=$(hostname -s)
for v in whole layout; do
  {
    echo '[cluster]'
    echo 'controller = { name = "localhost", address = "127.0.0.1" }'
    echo '[cluster.slurm]'
    echo 'cluster_name = "devcheck"'
    echo '[[cluster.nodes]]'
    echo "names = \"$host\""
    echo 'address = "127.0.0.1"'
    echo 'cpus = 16'
    echo 'memory_gb = 128'
    echo '[cluster.nodes.gpus]'
    echo 'count = 1'
    echo 'type = "h200"'
    echo 'memory_gb = 141'
    echo 'mig = true'
    if [ $v = layout ]; then
      echo '[[cluster.nodes.gpus.mig_layouts]]'
      echo 'gpus = [0]'
      echo 'profiles = ["3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]'
    fi
  } > $1/$v.toml
done
