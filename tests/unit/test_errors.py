import pickle

from nemo_resiliency_plugins import ResiliencyConfigError


def test_message_names_plugin_field_value_and_allowed():
    err = ResiliencyConfigError("FaultTolerancePlugin", "num_in_job_restarts", -1, "an integer >= 0")
    text = str(err)
    assert "FaultTolerancePlugin.num_in_job_restarts" in text
    assert "-1" in text
    assert "an integer >= 0" in text
    assert isinstance(err, ValueError)


def test_detail_only_message_and_pickle_round_trip():
    err = ResiliencyConfigError("InProcessRestartPlugin", None, detail="refuses run.SlurmExecutor")
    assert str(err) == "InProcessRestartPlugin: refuses run.SlurmExecutor"
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) and again.plugin == "InProcessRestartPlugin"


def test_unprintable_value_does_not_hide_the_error():
    class Evil:
        def __repr__(self):
            raise RuntimeError("boom")

    assert "Evil object" in str(ResiliencyConfigError("P", "f", Evil(), "x"))
