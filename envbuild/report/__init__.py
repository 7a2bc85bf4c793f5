"""The job report: what a step did with its GPUs and CPUs.

Flow, one way: a light sampler per node (sampler.py, reading /proc through procs.py and the GPUs through
gpus.py, one module per GPU tool in gpusources/) writes its records into the task's stderr, framed by wire.py;
envrun's step supervisor (envbuild.launch.supervise) takes them out of srun's stderr and feeds them to
collect.py; when the step ends, stepfindings.py judges the collected model (reportmodel.py) and reportrender.py
writes the summary, report.json, report.html and the PNG timeline.
"""
