"""CorGrad: per-domain gradient correction at the granularity of output-channel chunks (Zhou et
al., ECAI 2024).

* :mod:`.corgrad`: the algorithm and its steps (conflict projection, outlier blending, the sum);
* :mod:`.chunks`: where the chunks lie in the domains' flat gradients, their Gram matrices and
  the combination that applies a result;
* :mod:`.flat`: the domains' flat gradients and the update, each parameter's ``.grad`` a view of
  it.
"""
