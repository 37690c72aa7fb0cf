#!/bin/sh
# A stand-in for AWS's neuron-monitor, for the tests of prism smi's Neuron source: checks the
# configuration it is given (-c FILE) and prints scripted reports, one JSON line every 0.2 s.
# FAKE_NEURON_MONITOR picks the script:
#   (unset)     two trainium2 devices of two NeuronCores: the calling process on cores 0 and 1
#               (device 0), pid 1 on core 2 (device 1)
#   exits       one report, then exit status 3
#   garbage     a line that is not JSON, then the reports
#   no-driver   reports without devices, the hardware part's error saying why
[ "$1" = "-c" ] && [ -f "$2" ] || { echo "usage: $0 -c CONFIG" >&2; exit 2; }
grep -q '"neuroncore_counters"' "$2" && grep -q '"memory_used"' "$2" || exit 2
report() {
  printf '%s\n' '{"neuron_runtime_data":[{"pid":'"$PPID"',"neuron_runtime_tag":"7","error":"","report":{"neuroncore_counters":{"period":1.0,"neuroncores_in_use":{"0":{"neuroncore_utilization":50.0},"1":{"neuroncore_utilization":30.0}},"error":""},"memory_used":{"period":1.0,"neuron_runtime_used_bytes":{"host":1000,"neuron_device":3000000000,"usage_breakdown":{"neuroncore_memory_usage":{"0":{"constants":1000000000,"model_code":500000000,"tensors":1000000000},"1":{"tensors":500000000}}}},"error":""}}},{"pid":1,"neuron_runtime_tag":"8","error":"","report":{"neuroncore_counters":{"neuroncores_in_use":{"2":{"neuroncore_utilization":90.0}}},"memory_used":{"neuron_runtime_used_bytes":{"usage_breakdown":{"neuroncore_memory_usage":{"2":{"tensors":2000000000}}}}}}}],"neuron_hardware_info":{"neuron_device_type":"trainium2","neuron_device_count":2,"neuroncore_per_device_count":2,"neuron_device_memory_size":34359738368,"error":""}}'
}
case "$FAKE_NEURON_MONITOR" in
  exits) report; exit 3 ;;
  garbage) echo "neuron-monitor: starting" ;;
esac
while :; do
  if [ "$FAKE_NEURON_MONITOR" = no-driver ]; then
    printf '%s\n' '{"neuron_runtime_data":[],"neuron_hardware_info":{"neuron_device_count":0,"neuroncore_per_device_count":0,"error":"open /dev/neuron0: no such file or directory"}}'
  else
    report
  fi
  sleep 0.2
done
