"""What the package relies on inside TRL 1.16 and transformers, each written down and checked: ``contract`` (the
facts of ``GRPOTrainer`` the driver builds on, checked against TRL's source), ``sampler_settings`` (the distribution
a rollout samples from), ``vllm_engine`` (TRL's colocated vLLM engine), ``positions`` and ``prefix_forward``
(position ids and the shared-prompt forward), ``models`` (unwrapping a model), ``distributed`` (launch checks and
auxiliary models on several processes)."""
