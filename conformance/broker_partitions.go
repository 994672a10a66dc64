package conformance

// The broker on a store split over partitions (mqtt.NewPartitioned): the
// QoS 2 pipeline, durable-session and fleet cases that most depend on
// where state lives, run again with every broker of the case (in this
// process, a second node on the same store, a child process killed with
// SIGKILL) opening the store as three engines. A client's session state
// and the messages it publishes are then in its client id's partition,
// and a subscriber's checkpoint holds a cursor per partition, so these
// cases check that a publisher's messages and a subscriber's state may
// live in different logs without a gap, a duplicate or a reordering of
// one publisher's messages.

// brokerPartitions is how many partitions the cases below split the
// store over: enough that a handful of client ids lands in all of them.
const brokerPartitions = 3

// onPartitions is the case run on a store split over brokerPartitions.
func onPartitions(name string, run func(T, Target)) Case {
	return Case{Name: name, Run: func(t T, tg Target) {
		tg.Partitions = brokerPartitions
		run(t, tg)
	}}
}

func init() {
	register("partitions",
		onPartitions("P01_qos2_burst_ordering_exactly_once", caseBurstOrderingExactlyOnce),
		onPartitions("P02_qos2_dup_publish_across_reconnect", caseDupPublishAcrossReconnect),
		onPartitions("P03_qos2_crash_between_pubrec_and_pubrel", caseCrashBetweenPubrecAndPubrel),
		onPartitions("P04_qos2_outbound_crash_after_subscriber_pubrec", caseOutboundCrashAfterSubscriberPubrec),
		onPartitions("P05_qos2_retried_pubrel_on_another_node", caseRetriedPubrelOnAnotherNode),
		onPartitions("P06_qos2_session_takeover_with_exchanges_in_flight", caseSessionTakeoverWithExchangesInFlight),
		onPartitions("P07_qos1_property_pipeline", casePropertyQoS1Pipeline),
		onPartitions("P08_qos1_resume_through_save_and_resume", caseQoS1ResumeThroughSaveAndResume),
		onPartitions("P09_fleet_routing_many_sessions_wildcards_shared_groups", caseFleetRouting),
		onPartitions("P10_fleet_shared_group_queue_while_no_member_online", caseFleetSharedQueue),
	)
}
